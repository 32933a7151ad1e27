"""How a long poll finds its client's connection and tells that the client hung up."""

from __future__ import annotations

import socket
import ssl

from django_durable_jobs.api.long_poll import client_socket, hung_up


def test_a_connected_client_is_not_hung_up_even_with_bytes_pending() -> None:
    server, client = socket.socketpair()
    with server, client:
        assert client_socket({"gunicorn.socket": server}) is server
        assert not hung_up(server)
        client.sendall(b"GET / HTTP/1.1\r\n")  # a pipelined request: peeked, not read
        assert not hung_up(server)
        assert server.recv(100) == b"GET / HTTP/1.1\r\n"


def test_a_closed_client_is_hung_up() -> None:
    server, client = socket.socketpair()
    with server:
        client.close()
        assert hung_up(server)


def test_the_socket_is_found_under_wsgi_input_as_wsgiref_wraps_it() -> None:
    server, client = socket.socketpair()
    with server, client, server.makefile("rb") as reader:
        assert client_socket({"wsgi.input": reader}) is server

        class Limited:  # Django's LimitedStream keeps only the stream's bound methods
            def __init__(self, stream: object) -> None:
                self._read = stream.read  # type: ignore[attr-defined]

        assert client_socket({"wsgi.input": Limited(reader)}) is server


def test_no_socket_or_a_tls_one_is_none() -> None:
    assert client_socket({}) is None
    assert client_socket({"wsgi.input": object()}) is None
    context = ssl.create_default_context()
    with context.wrap_socket(
        socket.socket(), server_hostname="localhost", do_handshake_on_connect=False
    ) as wrapped:
        assert client_socket({"gunicorn.socket": wrapped}) is None
