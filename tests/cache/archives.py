"""Reading and re-packing a tar bundle's members in memory, as the tamper tests do."""

from __future__ import annotations

import io
import tarfile


def tar_members(path) -> dict[str, bytes]:
    with tarfile.open(path) as tf:
        return {m.name: tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()}


def tar_repack(path, files: dict[str, bytes]) -> None:
    with tarfile.open(path, "w") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


# -- hostile archives, written header by header (tarfile would take minutes for a million) ----
def _template(kind: bytes, size: int) -> bytearray:
    head = bytearray(512)
    head[100:108] = b"0000755\0"
    head[108:116] = head[116:124] = b"0000000\0"
    head[124:136] = b"%011o\0" % size
    head[136:148] = b"00000000000\0"
    head[148:156] = b" " * 8  # the checksum counts its own field as spaces
    head[156:157] = kind
    head[257:265] = b"ustar\x0000"
    return head


def tar_header(name: bytes, kind: bytes = b"0", size: int = 0) -> bytes:
    """A ustar header block: `kind` b"0" a regular file, b"5" a directory."""
    head = _template(kind, size)
    head[0 : len(name)] = name
    head[148:156] = b"%06o\0 " % sum(head)
    return bytes(head)


def write_many_members(path, count: int) -> None:
    """A plain tar of `count` empty regular files, each with its own name (51 MB for 100,000)."""
    head = _template(b"0", 0)
    base = sum(head)
    with open(path, "wb") as f:
        block = []
        for i in range(count):
            name = b"entries/%07d.json" % i
            head[0 : len(name)] = name
            head[148:156] = b"%06o\0 " % (base + sum(name))
            block.append(bytes(head))
            if len(block) == 8192:
                f.write(b"".join(block))
                block = []
        f.write(b"".join(block) + b"\0" * 1024)


def write_repeated_gzip(path, block: bytes, times: int, tail: bytes = b"\0" * 1024) -> None:
    """A valid gzip of `block` repeated `times` then `tail`: the block is deflated once (full
    flush: no reference to earlier data) and its bytes repeated, so a gigabyte is written in a
    second; the trailer's CRC and length are those of the whole."""
    import struct
    import zlib

    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\0\0\0\0\x00\xff")
        for _ in range(times):
            f.write(chunk)
            crc = zlib.crc32(block, crc)
        f.write(deflate.compress(tail) + deflate.flush(zlib.Z_FINISH))
        crc = zlib.crc32(tail, crc)
        f.write(struct.pack("<II", crc, (len(block) * times + len(tail)) & 0xFFFFFFFF))


def write_many_directories(path, count: int) -> None:
    """A tar.gz of `count` directory members (all named d/: tar allows it), about 2 MB."""
    per = 4000
    write_repeated_gzip(path, tar_header(b"d/", b"5") * per, count // per)
    assert count % per == 0


def write_gzip_bomb(path, members: int, member_bytes: int) -> None:
    """A tar.gz of `members` regular files of `member_bytes` zeros each (1.5 MB for 1.5 GB):
    the zeros are deflated once and their bytes repeated after each member's own header."""
    import struct
    import zlib

    deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
    zeros = b"\0" * member_bytes
    deflated_zeros = deflate.compress(zeros) + deflate.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\0\0\0\0\x00\xff")
        for i in range(members):
            head = tar_header(b"entries/%04d.json" % i, b"0", member_bytes)
            f.write(deflate.compress(head) + deflate.flush(zlib.Z_FULL_FLUSH) + deflated_zeros)
            crc = zlib.crc32(zeros, zlib.crc32(head, crc))
        tail = b"\0" * 1024
        f.write(deflate.compress(tail) + deflate.flush(zlib.Z_FINISH))
        size = members * (512 + member_bytes) + len(tail)
        f.write(struct.pack("<II", zlib.crc32(tail, crc), size & 0xFFFFFFFF))
