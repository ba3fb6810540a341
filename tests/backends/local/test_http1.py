"""The router's HTTP/1.1 framing (``backends/local/http1.py``), the one module both of its
paths use: where a body ends, fed as bytes arrive (the relay) or read as asked (the stream
path), and the shapes it refuses."""

from __future__ import annotations

import pytest

from shipway.backends.local import http1

CHUNKED = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Sum: 1\r\n\r\n"
NEXT = b"GET /next HTTP/1.1\r\nHost: a\r\n\r\n"


def fed(body: http1.Body, data: bytes, step: int) -> int:
    """Feed ``data`` in pieces of ``step`` bytes; how many bytes belonged to the body."""
    taken = 0
    for i in range(0, len(data), step):
        piece = data[i : i + step]
        took = body.feed(piece)
        taken += took
        if body.done:
            return taken
        assert took == len(piece)
    return taken


@pytest.mark.parametrize("step", [1, 2, 3, 7, 1000])
def test_a_chunked_body_ends_after_its_trailers_however_its_bytes_arrive(step: int) -> None:
    body = http1.Body(("chunked", 0))
    assert fed(body, CHUNKED + NEXT, step) == len(CHUNKED)
    assert body.done


def test_a_reader_asking_what_the_framer_wants_never_reads_past_the_body() -> None:
    """The stream path's way: a line when the framer wants a line, else at most ``want``."""
    for framing, data in ((("chunked", 0), CHUNKED), (("length", 11), b"hello world")):
        body, at, read = http1.Body(framing), 0, b""
        wire = data + NEXT
        while not body.done:
            want = body.want()
            end = wire.index(b"\n", at) + 1 if not want else at + want
            piece, at = wire[at:end], end
            assert body.feed(piece) == len(piece)
            read += piece
        assert read == data


def test_lengths_none_and_close() -> None:
    body = http1.Body(("length", 4))
    assert (body.feed(b"ab"), body.done) == (2, False)
    assert (body.feed(b"cdEXTRA"), body.done) == (2, True)
    assert http1.Body(("none", 0)).done
    assert http1.Body(("length", 0)).done
    close = http1.Body(("close", 0))
    assert (close.feed(b"to the end"), close.done) == (10, False)


@pytest.mark.parametrize("size", [b"0x5", b"+5", b"-0", b"5_0", b" 5", b"", b"z"])
def test_a_chunk_size_that_is_not_plain_hex_is_refused(size: bytes) -> None:
    """Python's int(_, 16) takes "0x5", "+5" and "5_0"; an app's parser does not: read
    differently on both sides, a body's end is a request-smuggling shape."""
    with pytest.raises(http1.BadMessage) as refused:
        http1.Body(("chunked", 0)).feed(size + b"\r\nhello\r\n0\r\n\r\n")
    assert refused.value.status == 400


def test_chunk_sizes_in_either_case_with_extensions_are_read() -> None:
    assert http1.chunk_size(b"1aF\r\n") == 0x1AF
    assert http1.chunk_size(b"10 ;name=value\r\n") == 16


def test_a_response_head_is_read_and_told_whether_its_connection_is_reusable() -> None:
    response = http1.read_response(b"HTTP/1.1 200 OK\r\nContent-Length: 3")
    assert (response.status, response.framing(b"GET")) == (200, ("length", 3))
    assert response.reusable(response.framing(b"GET"))
    closing = http1.read_response(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3")
    assert not closing.reusable(closing.framing(b"GET"))
    to_eof = http1.read_response(b"HTTP/1.0 200 OK")
    assert to_eof.framing(b"GET") == ("close", 0) and not to_eof.reusable(("close", 0))
    with pytest.raises(http1.BadMessage) as refused:
        http1.read_response(b"SSH-2.0-OpenSSH")
    assert refused.value.status == 502
