"""A local `gs://` for the tests: PyPI's `gcp-storage-emulator`, with the two GCS behaviours easydata relies
on that it lacks, and `gcsfs` pointed at it.

Run as a module (`python -m tests.gcs_emulator --port P --bucket B --log FILE`) it serves the emulator's JSON
API in memory, plus:

- **`ifGenerationMatch=0` on uploads** (GCS's create-if-absent, what fsspec's `xb` mode sends through gcsfs
  and the output lock relies on): an upload with it to an existing object fails with 412 Precondition
  Failed, as on GCS (checked when a resumable upload starts and again when its data arrives, where the
  object is created). The emulator ignores the parameter, so two lock files would both "win". Its server
  handles one request at a time, so the check and the create cannot interleave.
- **`moveTo`** (GCS's atomic rename within a bucket, `objects.move`, which gcsfs's `mv` calls first): the
  emulator answers 501 and gcsfs retries that for about 30 s before copying; here it is the emulator's own
  copy followed by its delete, under the same one-request-at-a-time server.

Every upload that carries a precondition and every move is logged as one JSON line (`--log`), so a test can
assert what easydata sent. Nothing else of the emulator is changed.

`gcs_emulator(root, site)` starts it for a test and yields the environment that points gcsfs (and Beam's
`google-cloud-storage` client) at it; the packages (`gcsfs`, the emulator, `apache-beam[gcp]`) are outside
the test environment, in `site` (`tests.conftest.pip_site`), appended to `sys.path` of every process
started with that environment.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from http import HTTPStatus
from pathlib import Path
from typing import Any, Iterator

#: The packages of the `gs://` tests, installed outside the test environment (`tests.conftest.pip_site`).
GCS_REQUIREMENTS = ("apache-beam[gcp]==2.77.0", "gcsfs==2026.10.1", "gcp-storage-emulator==2026.7.19")


def _object_name(request: Any) -> str | None:
    """The object an upload request creates: `?name=`, or the name in its JSON metadata."""
    if "name" in request.query:
        return request.query["name"][0]
    data = request.data
    if isinstance(data, dict):
        meta = data.get("meta") if isinstance(data.get("meta"), dict) else data
        return meta.get("name")
    return None


def _serve(port: int, bucket: str, log_path: Path) -> None:
    from gcp_storage_emulator import server
    from gcp_storage_emulator.exceptions import NotFound
    from gcp_storage_emulator.handlers import objects
    from gcp_storage_emulator.settings import API_ENDPOINT

    def log(**entry: Any) -> None:
        with open(log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")

    original_insert = objects.insert

    def insert(request, response, storage, *args, **kwargs):
        condition = request.query.get("ifGenerationMatch", [None])[0]
        if condition is not None:
            name = _object_name(request)
            bucket_name = request.params["bucket_name"]
            exists = False
            if condition == "0" and name is not None:
                try:
                    storage.get_file_obj(bucket_name, name)
                    exists = True
                except NotFound:
                    pass
            log(op="upload", object=name, ifGenerationMatch=condition, refused=exists,
                step="data" if "upload_id" in request.query else "start")
            if exists:
                response.status = HTTPStatus.PRECONDITION_FAILED
                response.json({"error": {"code": 412, "message": "At least one of the pre-conditions you"
                                                                  " specified did not hold."}})
                return None
        return original_insert(request, response, storage, *args, **kwargs)

    def move(request, response, storage, *args, **kwargs):
        bucket_name, source, dest = (request.params["bucket_name"], request.params["object_id"],
                                     request.params["dest_object_id"])
        try:
            moved = objects._copy(request.base_url, storage, bucket_name, source, bucket_name, dest)
            storage.delete_file(bucket_name, source)
        except NotFound:
            response.status = HTTPStatus.NOT_FOUND
            log(op="move", source=source, dest=dest, found=False)
            return
        log(op="move", source=source, dest=dest, found=True)
        response.json(moved)

    route = r"/b/(?P<bucket_name>[-.\w]+)/o/(?P<object_id>.*[^/]+)/moveTo/o/(?P<dest_object_id>.*[^/]+)$"
    server.HANDLERS = (
        (rf"^{API_ENDPOINT}{route}", {"POST": move}), (rf"^{route}", {"POST": move}),
        *((regex, {method: insert if handler is original_insert else handler for method, handler in handlers.items()})
          for regex, handlers in server.HANDLERS))
    emulator = server.create_server("localhost", port, in_memory=True, default_bucket=bucket)
    emulator.run()


@contextlib.contextmanager
def gcs_emulator(root: Path, site: Path, bucket: str) -> Iterator[dict[str, str]]:
    """Starts the emulator with `bucket`; yields the environment for processes that use `gs://` (the
    emulator's address for gcsfs and google-cloud-storage, `site` on their path) and stops it after."""
    from tests.conftest import REPO_ROOT, background_service, free_port

    shim = root / "gcs-site"
    shim.mkdir(parents=True, exist_ok=True)
    # Appended, not prepended: the test environment's own Beam, pyarrow and fsspec stay the ones imported.
    (shim / "sitecustomize.py").write_text(f"import sys\nsys.path.append({str(site)!r})\n")
    port = free_port()
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(shim), os.environ.get("PYTHONPATH")])),
           "STORAGE_EMULATOR_HOST": f"http://localhost:{port}",
           # gcsfs's hierarchical-namespace support asks the bucket for its storage layout first, an API the
           # emulator does not serve.
           "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
           "GOOGLE_CLOUD_PROJECT": "easydata-test", "NO_GCE_CHECK": "true"}
    log = root / "gcs-requests.jsonl"
    emulator_env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), env["PYTHONPATH"]])}
    with background_service(["tests.gcs_emulator", "--port", str(port), "--bucket", bucket, "--log", str(log)],
                            root / "gcs-emulator", emulator_env, port, "GCS emulator"):
        yield {**env, "EASYDATA_TEST_GCS_LOG": str(log)}


def requests_logged(env: dict[str, str]) -> list[dict[str, Any]]:
    """The preconditioned uploads and moves the emulator served, in order."""
    path = Path(env["EASYDATA_TEST_GCS_LOG"])
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--log", type=Path, required=True)
    arguments = parser.parse_args()
    _serve(arguments.port, arguments.bucket, arguments.log)
