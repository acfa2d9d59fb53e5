"""Read TensorFlow name-based checkpoints (the TensorBundle V2 format) without TensorFlow.

A checkpoint ``PREFIX`` is ``PREFIX.index`` plus ``PREFIX.data-NNNNN-of-MMMMM`` shards. The index is a
LevelDB-style table (sorted string keys, prefix-compressed blocks, a 48-byte footer): the empty key holds a
``BundleHeaderProto`` (shard count, endianness), every other key is a variable name whose value is a
``BundleEntryProto`` (dtype, shape, shard, offset, size). The data shards hold each tensor's raw
little-endian bytes at that offset. Only the few protobuf fields needed are decoded, by hand, so the
package needs neither TensorFlow nor protobuf at run time.

    ckpt = TFCheckpoint("albert_base/model.ckpt-best")
    for name, dtype, shape in ckpt.variables(): ...
    array = ckpt.read("bert/embeddings/word_embeddings")
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from albertlm.errors import CheckpointError

INDEX_SUFFIX = ".index"
_DATA = re.compile(r"\.data-\d{5}-of-\d{5}$")
_TABLE_MAGIC = 0xDB4775248B80FB57
_FOOTER_LEN = 48  # two block handles padded to 40 bytes, then the 8-byte magic
_BLOCK_TRAILER = 5  # compression type byte + masked crc32c
# tensorflow/core/framework/types.proto -> (name, numpy dtype); bfloat16 is widened to float32 on read.
DTYPES: dict[int, tuple[str, str | None]] = {
    1: ("float32", "<f4"), 2: ("float64", "<f8"), 3: ("int32", "<i4"), 4: ("uint8", "u1"), 5: ("int16", "<i2"),
    6: ("int8", "i1"), 7: ("string", None), 9: ("int64", "<i8"), 10: ("bool", "?"), 14: ("bfloat16", "<u2"),
    17: ("uint16", "<u2"), 19: ("float16", "<f2"), 22: ("uint32", "<u4"), 23: ("uint64", "<u8"),
}


class CheckpointFormatError(CheckpointError):
    """A file that is not (or no longer) a readable TensorFlow V2 checkpoint: names the file and the fix."""


@dataclass(frozen=True)
class Entry:
    name: str
    dtype: str  # TensorFlow's name: float32, int64, ...
    shape: tuple[int, ...]
    shard: int
    offset: int
    size: int
    sliced: bool  # a partitioned variable, stored as slices under other keys


# ----------------------------------------------------------------------------- wire-format helpers
def _varint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise CheckpointFormatError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise CheckpointFormatError("varint longer than 10 bytes")


def _proto_fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) of a serialized protobuf: ints for varint / fixed, bytes for length-delimited."""
    out, pos = [], 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = struct.unpack_from("<Q", buf, pos)[0], pos + 8
        elif wire == 2:
            n, pos = _varint(buf, pos)
            value, pos = bytes(buf[pos : pos + n]), pos + n
        elif wire == 5:
            value, pos = struct.unpack_from("<I", buf, pos)[0], pos + 4
        else:
            raise CheckpointFormatError(f"unsupported protobuf wire type {wire}")
        out.append((field, value))
    return out


def _signed64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def snappy_decompress(data: bytes) -> bytes:
    """Raw Snappy (the block compression LevelDB tables may use): literals and back-references."""
    n, pos = _varint(data, 0)
    out = bytearray()
    while pos < len(data):
        tag = data[pos]
        pos += 1
        kind = tag & 3
        if kind == 0:  # literal; lengths over 60 follow in 1-4 little-endian bytes
            length = tag >> 2
            if length >= 60:
                extra = length - 59
                length = int.from_bytes(data[pos : pos + extra], "little")
                pos += extra
            length += 1
            out += data[pos : pos + length]
            pos += length
            continue
        if kind == 1:
            length, offset = 4 + ((tag >> 2) & 7), ((tag >> 5) << 8) | data[pos]
            pos += 1
        elif kind == 2:
            length, offset = (tag >> 2) + 1, int.from_bytes(data[pos : pos + 2], "little")
            pos += 2
        else:
            length, offset = (tag >> 2) + 1, int.from_bytes(data[pos : pos + 4], "little")
            pos += 4
        if offset == 0 or offset > len(out):
            raise CheckpointFormatError("corrupt snappy block (copy before the start)")
        for _ in range(length):  # byte by byte: a copy may overlap what it writes
            out.append(out[-offset])
    if len(out) != n:
        raise CheckpointFormatError(f"corrupt snappy block ({len(out)} bytes decoded, {n} announced)")
    return bytes(out)


# ----------------------------------------------------------------------------- the index table
def _block(buf: bytes, handle: bytes, path: Path) -> bytes:
    offset, p = _varint(handle, 0)
    size, _ = _varint(handle, p)
    if offset + size + _BLOCK_TRAILER > len(buf):
        raise CheckpointFormatError(f"{path}: truncated (a block ends past the end of the file); copy it again")
    kind = buf[offset + size]
    data = buf[offset : offset + size]
    if kind == 0:
        return data
    if kind == 1:
        return snappy_decompress(data)
    raise CheckpointFormatError(f"{path}: unknown block compression type {kind}; not a TensorFlow checkpoint index")


def _block_entries(block: bytes) -> list[tuple[bytes, bytes]]:
    num_restarts = struct.unpack_from("<I", block, len(block) - 4)[0]
    end = len(block) - 4 - 4 * num_restarts
    out, pos, key = [], 0, b""
    while pos < end:
        shared, pos = _varint(block, pos)
        unshared, pos = _varint(block, pos)
        vlen, pos = _varint(block, pos)
        key = key[:shared] + block[pos : pos + unshared]
        pos += unshared
        out.append((key, block[pos : pos + vlen]))
        pos += vlen
    return out


def _table(path: Path) -> list[tuple[bytes, bytes]]:
    buf = path.read_bytes()
    if len(buf) < _FOOTER_LEN or struct.unpack_from("<Q", buf, len(buf) - 8)[0] != _TABLE_MAGIC:
        raise CheckpointFormatError(
            f"{path}: not a TensorFlow V2 checkpoint index (bad magic number); pass the prefix of a checkpoint "
            "saved by tf.train.Saver / tf.train.Checkpoint (PREFIX.index + PREFIX.data-*)"
        )
    footer = buf[len(buf) - _FOOTER_LEN :]
    _, p = _varint(footer, 0)  # the metaindex handle: unused (no filters in TensorBundle tables)
    _, p = _varint(footer, p)
    index_handle = footer[p:]
    entries = []
    for _, handle in _block_entries(_block(buf, index_handle, path)):
        entries.extend(_block_entries(_block(buf, handle, path)))
    return entries


def _entry(name: str, value: bytes) -> Entry:
    dtype = shard = offset = size = 0
    shape: list[int] = []
    sliced = False
    for field, v in _proto_fields(value):
        if field == 1:
            dtype = v
        elif field == 2:
            for f, dim in _proto_fields(v):
                if f == 2:
                    shape.append(next((_signed64(x) for g, x in _proto_fields(dim) if g == 1), 0))
        elif field == 3:
            shard = v
        elif field == 4:
            offset = v
        elif field == 5:
            size = v
        elif field == 7:
            sliced = True
    return Entry(name, DTYPES.get(dtype, (f"dtype{dtype}", None))[0], tuple(shape), shard, offset, size, sliced)


# ----------------------------------------------------------------------------- the checkpoint
def resolve_prefix(path: str | Path) -> Path:
    """PREFIX from a prefix, its ``.index`` or ``.data-*`` file, or a directory holding one checkpoint."""
    p = Path(path)
    if p.is_dir():
        state = p / "checkpoint"
        if state.is_file():  # tf.train.Saver's state file: model_checkpoint_path: "model.ckpt-1000"
            m = re.search(r'^model_checkpoint_path:\s*"(.*)"', state.read_text(errors="replace"), re.M)
            if m:
                prefix = Path(m.group(1))
                prefix = prefix if prefix.is_absolute() else p / prefix
                if prefix.with_name(prefix.name + INDEX_SUFFIX).is_file():
                    return prefix
                prefix = p / prefix.name  # a state file written on another machine holds its absolute path
                if prefix.with_name(prefix.name + INDEX_SUFFIX).is_file():
                    return prefix
        found = sorted(p.glob("*" + INDEX_SUFFIX))
        if len(found) == 1:
            return found[0].with_name(found[0].name[: -len(INDEX_SUFFIX)])
        if not found:
            raise FileNotFoundError(f"{p} holds no *.index file; pass the checkpoint prefix, e.g. {p}/model.ckpt-best")
        names = ", ".join(f.name[: -len(INDEX_SUFFIX)] for f in found[:5])
        raise CheckpointFormatError(
            f"{p} holds several checkpoints ({names}); pass one prefix, e.g. {p}/{names.split(',')[0]}"
        )
    name = p.name
    if name.endswith(INDEX_SUFFIX):
        p = p.with_name(name[: -len(INDEX_SUFFIX)])
    elif _DATA.search(name):
        p = p.with_name(_DATA.sub("", name))
    index = p.with_name(p.name + INDEX_SUFFIX)
    if index.is_file():
        return p
    if p.is_file():
        raise CheckpointFormatError(
            f"{p} has no {index.name} beside it: it is not a TensorFlow V2 checkpoint (a V1 checkpoint or "
            "another format); re-save it with TensorFlow's tf.train.Saver (V2 is the default since TF 1.2)"
        )
    raise FileNotFoundError(
        f"no checkpoint at {p}: expected {index.name} and {p.name}.data-00000-of-NNNNN; pass the prefix "
        "(e.g. model.ckpt-best, without extension)"
    )


class TFCheckpoint:
    """The variables of a TensorFlow V2 checkpoint: names, dtypes, shapes, and their values as numpy arrays."""

    def __init__(self, path: str | Path):
        self.prefix = resolve_prefix(path)
        self.index_path = self.prefix.with_name(self.prefix.name + INDEX_SUFFIX)
        self.num_shards = 1
        self.entries: dict[str, Entry] = {}
        for key, value in _table(self.index_path):
            name = key.decode("utf-8", errors="replace")
            if name == "":  # BundleHeaderProto
                for field, v in _proto_fields(value):
                    if field == 1:
                        self.num_shards = v
                    elif field == 2 and v == 1:
                        raise CheckpointFormatError(f"{self.index_path}: a big-endian checkpoint; not supported")
                continue
            self.entries[name] = _entry(name, value)

    def data_path(self, shard: int) -> Path:
        return self.prefix.with_name(f"{self.prefix.name}.data-{shard:05d}-of-{self.num_shards:05d}")

    def variables(self) -> list[tuple[str, str, tuple[int, ...]]]:
        """(name, dtype, shape) of every variable, sorted by name (as tf.train.list_variables)."""
        return [(e.name, e.dtype, e.shape) for e in sorted(self.entries.values(), key=lambda e: e.name)]

    def __contains__(self, name: str) -> bool:
        return name in self.entries

    def read(self, name: str) -> np.ndarray:
        if name not in self.entries:
            raise KeyError(f"{self.prefix}: no variable {name!r}")
        e = self.entries[name]
        np_dtype = DTYPES.get({v[0]: k for k, v in DTYPES.items()}.get(e.dtype, -1), (None, None))[1]
        if e.sliced:
            raise CheckpointFormatError(
                f"{self.prefix}: variable {name} is partitioned into slices, which this reader does not "
                "join; re-save the checkpoint without variable partitioning"
            )
        if np_dtype is None:
            raise CheckpointFormatError(f"{self.prefix}: variable {name} has dtype {e.dtype}, which has no array form")
        count = int(np.prod(e.shape, dtype=np.int64))
        itemsize = np.dtype(np_dtype).itemsize
        if count * itemsize != e.size:
            raise CheckpointFormatError(
                f"{self.index_path}: variable {name} claims {e.size} bytes for shape {list(e.shape)} of "
                f"{e.dtype}; the index is corrupt"
            )
        path = self.data_path(e.shard)
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing (variable {name} lives there); copy every .data-* shard")
        if path.stat().st_size < e.offset + e.size:
            raise CheckpointFormatError(
                f"{path} is truncated ({path.stat().st_size} bytes, variable {name} ends at byte "
                f"{e.offset + e.size}); download or copy it again"
            )
        with path.open("rb") as f:
            f.seek(e.offset)
            raw = f.read(e.size)
        array = np.frombuffer(raw, dtype=np_dtype).reshape(e.shape)
        if e.dtype == "bfloat16":  # the high half of a float32
            array = (array.astype(np.uint32) << 16).view(np.float32)
        return array.copy()
