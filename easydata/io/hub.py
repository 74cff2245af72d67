"""The Hugging Face Hub, as every Hugging Face tool uses it: tokenizers and datasets by hub id.

Files are fetched with `huggingface_hub` into its standard cache (`HF_HOME` / `HF_HUB_CACHE`), with
the token it finds in the environment (`HF_TOKEN`, `huggingface-cli login`); with `HF_HUB_OFFLINE=1`
only the cache is read. Every failure (offline and not cached, gated, not found, no network) is
one line naming the cause. `push_output` uploads a committed output to a dataset repo.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional, Sequence

from easydata.errors import InputError, OutputError, TokenizerError
from easydata.io.split_names import names_split, splits_named

__all__ = ["cache_dir", "hub_offline", "hub_unreachable", "offline_hf_path", "download_tokenizer", "resolve_hub_dataset",
           "push_output", "DATA_EXTENSIONS", "TOKENIZER_FILES", "CONFIG_FILES", "CHAT_TEMPLATE_FILE", "CHAT_TEMPLATE_DIR"]

#: A tokenizer's files as `transformers` saves them and the Hub holds them. The config files beside `tokenizer.json`
#: shape its ids (special tokens, chat template) and are hashed with it (`easydata.text.tokenizer`).
CONFIG_FILES = ("special_tokens_map.json", "tokenizer_config.json")
#: Where recent `transformers` (5 by default) saves chat templates: the default one beside
#: `tokenizer_config.json` (which then holds none), the others by name in a folder (`<name>.jinja`).
CHAT_TEMPLATE_FILE = "chat_template.jinja"
CHAT_TEMPLATE_DIR = "additional_chat_templates"
#: A tokenizer's files by fixed name (the named templates in `CHAT_TEMPLATE_DIR` are listed: `download_tokenizer`).
TOKENIZER_FILES = ("tokenizer.json", *CONFIG_FILES, CHAT_TEMPLATE_FILE)
DATA_EXTENSIONS = (".parquet", ".jsonl", ".json", ".csv", ".tsv", ".arrow", ".txt", ".jsonl.gz", ".json.gz",
                   ".jsonl.zst", ".csv.gz", ".txt.gz")


def cache_dir() -> Optional[str]:
    """The hub cache as the environment names it now (`HF_HUB_CACHE`, else `HF_HOME/hub`); None:
    huggingface_hub's default. Read per call: huggingface_hub reads it only when first imported."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    return None


def hub_offline() -> bool:
    """`HF_HUB_OFFLINE` as huggingface_hub reads it (set at any time, not only before import)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


#: Seconds to wait for the Hub's address and a TCP connection before saying it cannot be reached:
#: huggingface_hub's own retries take about 25 s (with a line per retry) when there is no network.
HUB_CONNECT_SECONDS = 3.0


def hub_unreachable() -> Optional[str]:
    """Why the Hub (`HF_ENDPOINT`, default huggingface.co) cannot be reached from here, found in a few
    seconds; None when it can, or when a proxy is configured (the proxy decides: huggingface_hub uses it)."""
    import socket
    from urllib.parse import urlsplit

    if any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None
    endpoint = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host, port = endpoint.hostname or "huggingface.co", endpoint.port or (443 if endpoint.scheme != "http" else 80)
    try:
        with socket.create_connection((host, port), timeout=HUB_CONNECT_SECONDS):
            return None
    except OSError as e:
        return f"{host}:{port}: {e.strerror or type(e).__name__}"


def _require_hub(what: str) -> None:
    """Raises TokenizerError at once when the Hub cannot be reached (instead of minutes of retries)."""
    problem = hub_unreachable()
    if problem is not None:
        raise TokenizerError(f"{what} is not in the Hugging Face cache and the Hub cannot be reached ({problem});"
                             " check the network, or set HF_HUB_OFFLINE=1 to use only the cache")


def _why(error: Exception, what: str) -> str:
    """One line for a hub failure."""
    name = type(error).__name__
    status = getattr(getattr(error, "response", None), "status_code", None)  # the Hub's HTTP answer, not its text
    if name == "GatedRepoError" or status in (401, 403):
        return f"{what} is gated or private: accept its terms on the Hub and set HF_TOKEN (or `huggingface-cli login`)"
    if name in ("RepositoryNotFoundError", "RevisionNotFoundError", "EntryNotFoundError"):
        return f"{what} was not found on the Hugging Face Hub"
    if hub_offline():
        return f"{what} is not in the Hugging Face cache and HF_HUB_OFFLINE=1 forbids downloading it"
    if name == "LocalEntryNotFoundError":
        return f"{what} is not in the Hugging Face cache and the Hub cannot be reached (no network?)"
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"cannot reach the Hugging Face Hub for {what} ({name}: {first[:200]}); check the network or set HF_HUB_OFFLINE=1"


def offline_hf_path(url: str) -> str:
    """`hf://datasets/owner/name[@rev]/path` -> the same path in the cached snapshot when
    `HF_HUB_OFFLINE=1` (huggingface_hub's `hf://` file system always asks the Hub); unchanged online.

    Raises:
      InputError: offline and the repo is not in the cache.
    """
    if not hub_offline():
        return url
    match = re.fullmatch(r"hf://(datasets/|spaces/)?([^/@]+/[^/@]+)(?:@([^/]+))?(?:/(.*))?", url)
    if not match:
        raise InputError(f"'{url}' is not an hf:// path (hf://datasets/owner/name/path)")
    kind, repo_id, revision, rest = match.groups()
    from huggingface_hub import snapshot_download

    repo_type = {"datasets/": "dataset", "spaces/": "space"}.get(kind or "", "model")
    try:
        root = snapshot_download(repo_id, repo_type=repo_type, revision=revision, local_files_only=True,
                                 cache_dir=cache_dir())
    except Exception as e:  # noqa: BLE001 - every hub failure becomes one line
        raise InputError(_why(e, f"'{url}'")) from None
    return str(Path(root) / rest) if rest else root


def download_tokenizer(repo_id: str, revision: Optional[str] = None) -> Path:
    """The local `tokenizer.json` of a hub model (downloaded with its config files when online).

    Raises:
      TokenizerError: one line: offline and not cached, gated, not found, no network, or the repo
        has no `tokenizer.json` (a slow tokenizer: convert it with transformers first).
    """
    from huggingface_hub import hf_hub_download

    what = f"tokenizer '{repo_id}'"
    if not hub_offline():
        _require_hub(what)
    try:
        found = Path(hf_hub_download(repo_id, "tokenizer.json", revision=revision, local_files_only=hub_offline(),
                                     cache_dir=cache_dir()))
    except Exception as e:  # noqa: BLE001 - every hub failure becomes one line
        if type(e).__name__ == "EntryNotFoundError":
            raise TokenizerError(f"{what} has no tokenizer.json on the Hub (only fast tokenizers are supported;"
                                 " convert it with transformers first)") from None
        raise TokenizerError(_why(e, what)) from None
    for name in (*TOKENIZER_FILES[1:], *_named_templates(repo_id, revision)):
        try:
            hf_hub_download(repo_id, name, revision=revision, local_files_only=hub_offline(), cache_dir=cache_dir())
        except Exception:  # noqa: BLE001 - optional files
            pass
    return found


def _named_templates(repo_id: str, revision: Optional[str]) -> list[str]:
    """The named chat template files of a hub model (`CHAT_TEMPLATE_DIR/<name>.jinja`, as
    `transformers` saves them); none offline (the cached snapshot holds those fetched before)."""
    if hub_offline():
        return []
    try:
        from huggingface_hub import HfApi

        entries = HfApi().list_repo_tree(repo_id, path_in_repo=CHAT_TEMPLATE_DIR, revision=revision)
        return sorted(e.path for e in entries if e.path.endswith(".jinja"))
    except Exception:  # noqa: BLE001 - no such folder (most repos), or the listing failed: optional files
        return []


def _readme_split_patterns(readme: Path, split: str) -> Optional[list[str]]:
    """The `data_files` patterns of `split` in a dataset card's YAML `configs` (default config first)."""
    import yaml

    text = readme.read_text(encoding="utf-8", errors="replace")
    match = re.match(r"^---\s*\n(.*?)\n---\s*\n", text, re.S)
    if not match:
        return None
    try:
        meta = yaml.safe_load(match.group(1)) or {}
    except yaml.YAMLError:
        return None
    configs = meta.get("configs") if isinstance(meta, dict) else None
    if not isinstance(configs, list) or not configs:
        return None
    config = next((c for c in configs if isinstance(c, dict) and c.get("default")), None) or \
        next((c for c in configs if isinstance(c, dict) and c.get("config_name") == "default"), configs[0])
    files = config.get("data_files") if isinstance(config, dict) else None
    if isinstance(files, (str, list)) and not (isinstance(files, list) and files and isinstance(files[0], dict)):
        return ([files] if isinstance(files, str) else list(files)) if split == "train" else []
    for entry in files or []:
        if isinstance(entry, dict) and entry.get("split") == split:
            path = entry.get("path")
            return [path] if isinstance(path, str) else list(path or [])
    return []


def _split_files(files: Sequence[str], split: str) -> list[str]:
    """The data files of `split`, by the `datasets` library's naming conventions
    (`easydata.io.split_names.names_split`: `train/`, `data/train-00000-of-00002.parquet`, `test.jsonl`);
    a repo whose files name no split at all is all `train`."""
    data = [f for f in files if f.lower().endswith(DATA_EXTENSIONS) and not f.split("/")[-1].startswith(".")]
    chosen = [f for f in data if names_split(f, split)]
    if chosen or split != "train":
        return sorted(chosen)
    return sorted(f for f in data if not splits_named(f))


def _chosen(listed: Sequence[str], readme: Optional[Path], split: str) -> list[str]:
    """The files of `split` among a dataset's `listed` files: by its card's `configs` when it has them,
    else by the `datasets` library's naming conventions (`_split_files`)."""
    import fnmatch

    patterns = _readme_split_patterns(readme, split) if readme is not None else None
    return sorted({f for f in listed for p in patterns if fnmatch.fnmatch(f, p)}) if patterns is not None \
        else _split_files(listed, split)


def _local_dataset(directory: Path, name: str, split: str) -> list[str]:
    """The data files of `split` of a dataset in a local directory, found as `datasets.load_dataset(DIR)`
    finds them (its card's `configs`, else file and folder names; hidden files left out)."""
    listed = sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*")
                    if p.is_file() and not any(part.startswith(".") for part in p.relative_to(directory).parts))
    readme = directory / "README.md"
    chosen = _chosen(listed, readme if readme.is_file() else None, split)
    if not chosen:
        raise InputError(f"dataset directory '{name}' has no data files for split '{split}' (files:"
                         f" {', '.join(listed[:8]) or 'none'})")
    return [str(directory / f) for f in chosen]


def resolve_hub_dataset(repo_id: str, split: str = "train", revision: Optional[str] = None) -> list[str]:
    """Local paths of the data files of `split` of a Hub dataset repo (downloaded when online), or of a
    local directory laid out like one (as `datasets.load_dataset("/local/dir")` accepts).

    Raises:
      InputError: one line: offline and not cached, gated, not found, no network, or no files for
        that split.
    """
    from huggingface_hub import HfApi, snapshot_download

    local = Path(os.path.expanduser(repo_id))
    if local.is_dir():
        return _local_dataset(local, repo_id, split)
    what = f"dataset '{repo_id}'"
    try:
        if hub_offline():
            root = Path(snapshot_download(repo_id, repo_type="dataset", revision=revision, local_files_only=True,
                                               cache_dir=cache_dir()))
            listed = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
        else:
            listed = HfApi().list_repo_files(repo_id, repo_type="dataset", revision=revision)
            root = None
        readme = None
        if "README.md" in listed:
            readme = root / "README.md" if root is not None else Path(snapshot_download(
                repo_id, repo_type="dataset", revision=revision, allow_patterns=["README.md"], cache_dir=cache_dir())) / "README.md"
        chosen = _chosen(listed, readme, split)
        if not chosen:
            raise InputError(f"{what} has no data files for split '{split}' (files: {', '.join(sorted(listed)[:8])})")
        if root is None:
            root = Path(snapshot_download(repo_id, repo_type="dataset", revision=revision, allow_patterns=chosen,
                                               cache_dir=cache_dir()))
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 - every hub failure becomes one line
        raise InputError(_why(e, what)) from None
    return [str(root / f) for f in chosen]


def push_output(output_dir: str, repo_id: str, *, private: bool = True, token: Optional[str] = None,
                committed: bool = False) -> str:
    """Uploads a committed output (manifest, shards, dead letters; not hidden lock or staging files)
    to the Hub dataset repo `repo_id`; returns the repo URL. `token`: else the environment's (`HF_TOKEN`,
    the login), as `huggingface_hub` finds it; it is never printed. `committed`: a failure says that the
    output itself is committed.

    Raises:
      OutputError: one line naming why the upload failed.
    """
    from huggingface_hub import HfApi

    kept = f" (the output is committed in {output_dir}; upload it again once that is fixed)" if committed else ""
    if hub_offline():
        raise OutputError(f"push_to_hub: HF_HUB_OFFLINE=1 forbids uploading to dataset repo {repo_id!r}{kept}")
    api = HfApi(token=token)
    try:
        url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        api.upload_folder(folder_path=output_dir, repo_id=repo_id, repo_type="dataset",
                          ignore_patterns=[".*", "**/.*"], commit_message="easydata-beam output")
    except Exception as e:  # noqa: BLE001 - every hub failure becomes one line
        why = _why(e, f"dataset repo {repo_id!r}")
        if token:
            from easydata.config import REDACTED

            why = why.replace(token, REDACTED)
        raise OutputError(f"push_to_hub: {why}{kept}") from None
    return str(url)
