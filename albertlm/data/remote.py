"""Shards in object storage: ``data build --out s3://bucket/prefix`` and ``pretrain --data s3://bucket/prefix``
(or any URL fsspec has a filesystem for: ``gs://``, ``az://``, ...; ``s3fs`` for S3, extra ``objectstore``).

A build is written locally, then uploaded file by file with its manifest.json last: a reader sees the old
build or the new one, never half of one. Reading fetches whole shard files, in parallel, into a bounded local
cache (``$ALBERTLM_CACHE``, default ``~/.cache/albertlm``; ``--cache-gb``), checks each against the sha256 its
manifest records, then memory-maps them as a local build: the data order, ``--resume`` at any step and the
pretraining speed are those of a local folder, since the training loop never reads the network. Processes on
one host share the cache (a lock file: one downloads, the others wait and reuse it). A dynamic build draws
segments from every shard at any step, so the whole build must fit in the cache; a build that does not is
refused in one line rather than thrashing. Credentials come from the environment as for any S3 client
(``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL`` for S3-compatible servers).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from albertlm.errors import DataError, MissingDependency
from albertlm.files import sha256, write_text_atomic

_log = logging.getLogger(__name__)

_URL = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://")
CACHE_MARK = ".albertlm-cache"  # in every folder the cache made (the only ones eviction may delete)
MANIFEST = "manifest.json"


def is_remote(path: str | Path | None) -> bool:
    """A URL other than file:// (those name object storage; a plain path is a local folder)."""
    return path is not None and bool(_URL.match(str(path))) and not str(path).startswith("file://")


def filesystem(url: str) -> tuple[Any, str]:
    """(the fsspec filesystem for ``url``, the path inside it); one line when its library is missing."""
    try:
        import fsspec
    except ImportError:
        raise MissingDependency("object storage needs fsspec and s3fs: pip install 'albertlm[objectstore]'") from None
    try:
        return fsspec.core.url_to_fs(url)
    except (ImportError, ValueError) as e:
        raise MissingDependency(f"{url}: no filesystem for this URL ({e}); for s3:// pip install "
                                "'albertlm[objectstore]'") from None


def cache_root(cache_dir: str | Path | None = None) -> Path:
    return Path(cache_dir or os.environ.get("ALBERTLM_CACHE") or Path.home() / ".cache" / "albertlm") / "shards"


def _files(manifest: dict) -> list[tuple[str, dict]]:
    """(path inside the build, its manifest entry) of every shard file; the manifest was checked on arrival."""
    from albertlm.data.manifest import shard_files

    return shard_files(manifest, MANIFEST)


def _remote_manifest(fs: Any, root: str, url: str) -> dict:
    try:
        text = fs.cat_file(f"{root}/{MANIFEST}")
    except FileNotFoundError:
        raise DataError(f"{url} holds no {MANIFEST}: not a finished albertlm data build (build one with "
                        f"`albertlm data build --out {url}`)") from None
    except Exception as e:  # the client's own errors: credentials, endpoint, permissions
        raise DataError(f"{url}: cannot read {MANIFEST} ({_reason(e)}); check the credentials and AWS_ENDPOINT_URL "
                        "in the environment") from None
    from albertlm.data.manifest import shard_files

    try:
        manifest = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise DataError(f"{url}/{MANIFEST} is damaged ({e}); build the data again") from None
    shard_files(manifest, f"{url.rstrip('/')}/{MANIFEST}")  # its names, counts and sizes, before any download
    return manifest


def fetch(url: str, cache_dir: str | Path | None = None, cache_gb: float = 50.0, workers: int = 8) -> Path:
    """The build at ``url`` as a local folder in the cache (downloaded, or reused when its files verify)."""
    fs, root = filesystem(url)
    manifest = _remote_manifest(fs, root, url)
    key = hashlib.sha256(f"{url.rstrip('/')}\n{manifest.get('build_id')}".encode()).hexdigest()[:20]
    cache = cache_root(cache_dir)
    local = cache / key
    need = sum(f["bytes"] for _, f in _files(manifest))
    if need > cache_gb * 1e9:
        raise DataError(f"{url} is {_size(need)}, more than the cache's {_size(cache_gb * 1e9)} (--cache-gb "
                        f"{cache_gb:g}): every step may read any shard, so the whole build must fit; raise "
                        f"--cache-gb to at least {need / 1e9:.3g}")  # fmt: skip
    local.mkdir(parents=True, exist_ok=True)
    (local / CACHE_MARK).touch()
    with _locked(local / ".lock"):
        if not _complete(local, manifest):
            t0 = time.time()
            _download(fs, root, local, manifest, workers, url)
            write_text_atomic(local / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
            _log.info("fetched %s (%.1f MB) into %s in %.1f s", url, need / 1e6, local, time.time() - t0)
    os.utime(local / CACHE_MARK)  # most recently used
    _evict(cache, keep=local, limit=cache_gb * 1e9)
    return local


def _complete(local: Path, manifest: dict) -> bool:
    """The cached copy is this build, whole (sizes; each file was checked against its sha256 when it came)."""
    try:
        if json.loads((local / MANIFEST).read_text(encoding="utf-8")) != manifest:
            return False
    except (OSError, ValueError):
        return False
    return all((local / name).is_file() and (local / name).stat().st_size == f["bytes"] for name, f in _files(manifest))


def _download(fs: Any, root: str, local: Path, manifest: dict, workers: int, url: str) -> None:
    (local / MANIFEST).unlink(missing_ok=True)  # the copy is complete again only when the manifest is back

    def get(item: tuple[str, dict]) -> None:
        name, entry = item
        dest = local / name
        if dest.is_file() and dest.stat().st_size == entry["bytes"] and sha256(dest) == entry["sha256"]:
            return
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".part")
        try:
            fs.get_file(f"{root}/{name}", str(tmp))
        except FileNotFoundError:
            tmp.unlink(missing_ok=True)
            raise DataError(f"{url.rstrip('/')}/{name} is missing from the store though its manifest lists it (deleted "
                            "since the build?); build the data again") from None
        except Exception as e:  # the client's own errors mid-download: permissions, a store gone
            tmp.unlink(missing_ok=True)
            raise DataError(f"{url.rstrip('/')}/{name}: the download failed ({_reason(e)}); run again") from None
        if sha256(tmp) != entry["sha256"]:
            tmp.unlink(missing_ok=True)
            raise DataError(f"{root}/{name} does not match the sha256 its manifest records: the object is "
                            "damaged or was replaced mid-read; build the data again")  # fmt: skip
        os.replace(tmp, dest)

    with ThreadPoolExecutor(max(1, workers)) as pool:
        list(pool.map(get, _files(manifest)))


def _size(n: float) -> str:
    """Bytes for a message, in the unit that shows them (23.2 kB, not 0.0 GB)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def _evict(cache: Path, keep: Path, limit: float) -> None:
    """Delete the least recently used cached builds (only folders the cache made) until the cache fits, and
    the staging folders of uploads whose process is gone."""
    _sweep_uploads(cache.parent)
    entries = [p for p in cache.iterdir() if p.is_dir() and (p / CACHE_MARK).is_file()] if cache.is_dir() else []
    sizes = {p: sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) for p in entries}
    total = sum(sizes.values())
    for p in sorted(entries, key=lambda p: (p / CACHE_MARK).stat().st_mtime):
        if total <= limit:
            break
        if p != keep:
            shutil.rmtree(p, ignore_errors=True)
            total -= sizes[p]
            _log.info("cache: removed %s (least recently used) to stay within %s", p, _size(limit))


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def upload(local: Path, url: str, workers: int = 8) -> None:
    """Put the finished build in ``local`` at ``url``: the shard files, then manifest.json (the switch), then
    the shard folder the previous manifest there named, if any (an earlier build's, so ours to remove)."""
    fs, root = filesystem(url)
    manifest = json.loads((local / MANIFEST).read_text(encoding="utf-8"))
    previous = check_writable(url)
    try:
        with ThreadPoolExecutor(max(1, workers)) as pool:
            list(pool.map(lambda item: fs.put_file(str(local / item[0]), f"{root}/{item[0]}"), _files(manifest)))
        fs.pipe_file(f"{root}/{MANIFEST}", (local / MANIFEST).read_bytes())
    except Exception as e:  # the client's own errors: permissions, quota, a store gone mid-upload
        raise DataError(f"{url}: the upload failed ({_reason(e)}); the build there is unchanged (its manifest.json "
                        "is written last), so run the build again") from None
    _remove_previous(fs, root, previous, manifest["shard_dir"])


def _remove_previous(fs: Any, root: str, previous: dict | None, current: str) -> None:
    """Delete the shard folder of the build ``previous`` (the manifest the store held before), if it holds
    exactly the objects that manifest lists: an edited manifest naming other objects deletes nothing."""
    try:
        listed = {name for name, _ in _files(previous)} if previous else set()
    except DataError:
        return
    old = previous["shard_dir"] if listed else None
    if not old or old == current:
        return
    with contextlib.suppress(FileNotFoundError):
        held = {p[len(root) + 1 :] for p in fs.find(f"{root}/{old}")}
        if held == listed:
            fs.rm(f"{root}/{old}", recursive=True)


def check_writable(url: str) -> dict | None:
    """One line unless ``url``'s store answers these credentials and its bucket exists (before a build, not
    after it); returns the manifest of the build already there, if any (``upload`` replaces it)."""
    fs, root = filesystem(url)
    try:
        text = fs.cat_file(f"{root}/{MANIFEST}")
    except FileNotFoundError:  # no build there yet, or no such bucket
        text = None
    except Exception as e:  # the client's own errors: credentials, endpoint, permissions
        raise DataError(f"{url}: cannot reach the object store ({_reason(e)}); check the credentials and "
                        "AWS_ENDPOINT_URL in the environment") from None
    bucket = root.split("/")[0]  # (empty for a filesystem of paths, memory:// or sftp://: no bucket to check)
    if text is None and bucket:
        try:
            fs.info(bucket)
        except FileNotFoundError:
            raise DataError(f"{url}: the bucket {bucket!r} does not exist; create it first, or check the URL and "
                            "AWS_ENDPOINT_URL") from None
        except Exception:  # noqa: BLE001 - credentials that may write a prefix but not see the bucket: go on
            pass
    if text is None:
        return None
    from albertlm.data.manifest import FORMAT

    try:
        previous = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        previous = None
    if not isinstance(previous, dict) or previous.get("format") != FORMAT:
        raise DataError(f"{url} holds a {MANIFEST} that no `albertlm data build` wrote; a build replaces only its "
                        "own: choose another --out (nothing was written)")
    return previous


def _reason(e: Exception) -> str:
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"


UPLOAD_PREFIX, UPLOAD_LOCK = "upload-", ".albertlm-upload.lock"


@contextlib.contextmanager
def staged_upload(url: str, cache_dir: str | Path | None = None):
    """A local folder to build into; when the block ends without an error, its build goes to ``url``
    (``upload``) and the folder is removed. The store is checked first: a bad URL fails before the build.
    The folder's lock is held while it is in use, so one left by a killed process is known as such and removed
    by the next upload or cache eviction (``_sweep_uploads``)."""
    import tempfile

    check_writable(url)
    base = cache_root(cache_dir).parent
    base.mkdir(parents=True, exist_ok=True)
    _sweep_uploads(base)
    with tempfile.TemporaryDirectory(dir=base, prefix=UPLOAD_PREFIX, ignore_cleanup_errors=True) as tmp, \
            open(Path(tmp) / f"{UPLOAD_LOCK}.tmp", "w") as lock:  # fmt: skip
        fcntl.flock(lock, fcntl.LOCK_EX)
        os.replace(Path(tmp) / f"{UPLOAD_LOCK}.tmp", Path(tmp) / UPLOAD_LOCK)  # seen by a sweep only once held
        yield Path(tmp)
        upload(Path(tmp), url)


def _sweep_uploads(base: Path) -> None:
    """Remove the upload staging folders in ``base`` whose lock no process holds (their upload was killed);
    a folder without the lock file is not one of ours and stays."""
    for folder in base.glob(UPLOAD_PREFIX + "*") if base.is_dir() else []:
        lock_path = folder / UPLOAD_LOCK
        if not folder.is_dir() or not lock_path.is_file():
            continue
        try:
            with open(lock_path) as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # taken: its process is gone
                shutil.rmtree(folder, ignore_errors=True)
                _log.info("cache: removed %s, left by an interrupted upload", folder)
        except (BlockingIOError, FileNotFoundError):
            continue  # in use by a running upload, or just removed by another sweep
