"""`easydata stats`: every number equals a count computed independently from the files (plain pyarrow /
numpy), per output, dataset and split; `--plot` writes a valid PNG."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from beam_pipelines.batch import run_batch
from easydata.cli import main
from easydata.config import PipelineConfig
from easydata.tools.stats import PERCENTILES, compute_stats, plot_stats
from tests.conftest import make_texts, write_jsonl


def _run(root: Path, tokenizer: Path, name: str, datasets: list[str], **sections) -> Path:
    for i, dataset in enumerate(datasets):
        write_jsonl(root / "in" / f"{dataset}.jsonl", ({"text": t} for t in make_texts(80 + 40 * i, seed=50 + i,
                                                                                           max_words=100)))
    save = {"output_dir": str(root / name), "num_shards": 2, **sections.pop("save", {})}
    config = PipelineConfig.from_dict({
        "default_tokenizer": str(tokenizer), "save": save, **sections,
        "datasets": [{"name": d, "data_files": str(root / "in" / f"{d}.jsonl")} for d in datasets]})
    run_batch(config, ["--direct_num_workers=1"], show_progress=False)
    return root / name


@pytest.fixture(scope="module")
def packed_output(tmp_path_factory, tokenizer_dir) -> Path:
    return _run(tmp_path_factory.mktemp("stats"), tokenizer_dir, "packed", ["web", "code"],
                pack={"enabled": True, "seq_length": 48, "strategy": "first_fit"})


@pytest.fixture(scope="module")
def split_output(tmp_path_factory, tokenizer_dir) -> Path:
    return _run(tmp_path_factory.mktemp("stats"), tokenizer_dir, "split", ["web"], save={"format": "bin",
                "validation_fraction": 0.3}, tokenize={"max_length": 40, "truncation": "window", "stride": 10})


def _length_stats(lengths: np.ndarray) -> dict:
    expected = {"count": len(lengths), "min": int(lengths.min()), "max": int(lengths.max()),
                "mean": round(float(lengths.mean()), 3)}
    expected.update({f"p{p}": int(np.percentile(lengths, p, method="inverted_cdf")) for p in PERCENTILES})
    return expected


def _check(entry: dict, ids: list[np.ndarray], lengths: np.ndarray, padding: int, all_tokens: int) -> None:
    values = np.concatenate(ids)
    assert entry["rows"] == len(ids)
    assert entry["tokens"] == len(values) - padding and entry["padding_tokens"] == padding
    assert entry["padding_ratio"] == round(padding / len(values), 6)
    assert entry["token_share"] == round(entry["tokens"] / all_tokens, 6)
    assert {k: v for k, v in entry["length"].items() if k != "unit"} == _length_stats(lengths)


@pytest.mark.slow
def test_packed_stats_equal_counts_from_the_files(packed_output):
    stats = compute_stats(str(packed_output))
    manifest = json.loads((packed_output / "manifest.json").read_text())
    per_output, all_tokens = {}, 0
    for name in ("code", "web"):
        table = pq.read_table(sorted((packed_output / name).glob("*.parquet")))
        ids = [np.array(r) for r in table.column("input_ids").to_pylist()]
        segments = [np.array(r) for r in table.column("segment_ids").to_pylist()]
        lengths = np.concatenate([np.bincount(s)[1:] for s in segments])  # tokens per segment id 1..k
        real = np.concatenate(ids)[np.concatenate(segments) != 0]
        per_output[name] = (ids, lengths[lengths > 0], int(sum((s == 0).sum() for s in segments)), real)
        all_tokens += len(real)
    for name, (ids, lengths, padding, real) in per_output.items():
        entry = stats["outputs"][name]
        _check(entry, ids, lengths, padding, all_tokens)
        assert entry["unique_tokens"] == len(np.unique(real)) and entry["length"]["unit"] == "segment"
        assert entry["documents"] == manifest["datasets"][name]["documents_written"]
    everything = np.concatenate([p[3] for p in per_output.values()])
    assert stats["total"]["unique_tokens"] == len(np.unique(everything))
    assert stats["total"]["tokens"] == all_tokens == manifest["totals"]["tokens"]


@pytest.mark.slow
def test_split_stats_per_output_dataset_and_split(split_output):
    stats = compute_stats(str(split_output))
    manifest = json.loads((split_output / "manifest.json").read_text())
    docs, all_tokens = {}, 0
    for name, info in manifest["datasets"].items():
        docs[name] = []
        for shard in info["shards"]:
            stream = np.memmap(split_output / shard["path"], dtype=manifest["schema"]["token_dtype"], mode="r")
            index = np.fromfile(split_output / shard["index_path"], dtype=np.int64)
            docs[name] += [np.asarray(stream[a:b]) for a, b in zip(index[:-1], index[1:])]
        all_tokens += sum(map(len, docs[name]))
    for name, rows in docs.items():
        _check(stats["outputs"][name], rows, np.array(list(map(len, rows))), 0, all_tokens)
        split = name.split("/")[1]
        assert stats["splits"][split]["tokens"] == stats["outputs"][name]["tokens"]
        assert stats["outputs"][name]["windowed_documents"] == manifest["datasets"][name]["windowed_documents"] > 0
    everything = [r for rows in docs.values() for r in rows]
    _check(stats["datasets"]["web"], everything, np.array(list(map(len, everything))), 0, all_tokens)
    assert stats["datasets"]["web"]["documents"] == 80 == stats["total"]["documents"]
    assert stats["total"]["extra_windows"] == sum(i["extra_windows"] for i in manifest["datasets"].values())


@pytest.mark.slow
def test_cli_stats_json_and_plot(split_output, tmp_path, capsys):
    png = tmp_path / "stats.png"
    assert main(["stats", str(split_output), "--json", "--plot", str(png)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["total"]["rows"] == compute_stats(str(split_output))["total"]["rows"]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    from PIL import Image

    with Image.open(png) as image:
        image.verify()
        assert image.format == "PNG" and image.size[0] > 400
    assert main(["stats", str(split_output)]) == 0
    table = capsys.readouterr().out
    assert "per split:" in table and "web/validation" in table and "windowed documents" in table


def test_plot_without_matplotlib_is_one_clear_error(packed_output, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["stats", str(packed_output), "--plot", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("easydata: error: --plot needs matplotlib") and len(err.splitlines()) == 1
    with pytest.raises(Exception, match="needs matplotlib"):
        plot_stats(compute_stats(str(packed_output)), str(tmp_path / "y.png"))


def test_the_plot_is_written_in_the_format_its_extension_names(packed_output, tmp_path, monkeypatch, capsys):
    """`--plot stats.svg` wrote PNG bytes into a file named `.svg`; `.txt` did too, after reading the output."""
    for name, magic in (("s.svg", b"<?xml"), ("s.pdf", b"%PDF"), ("s.PNG", b"\x89PNG"), ("s", b"\x89PNG")):
        assert main(["stats", str(packed_output), "--plot", str(tmp_path / name), "--quiet"]) == 0
        assert (tmp_path / name).read_bytes().startswith(magic), name
    capsys.readouterr()
    read = []
    monkeypatch.setattr("easydata.tools.stats.compute_stats", lambda *a, **k: read.append(a))
    assert main(["stats", str(packed_output), "--plot", str(tmp_path / "s.txt")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"easydata: error: --plot '{tmp_path / 's.txt'}': '.txt' is not an image format"
                          " matplotlib writes (") and "svg" in err and len(err.splitlines()) == 1
    assert read == [] and not (tmp_path / "s.txt").exists()  # refused before the output was read


def test_a_plot_path_that_cannot_be_written_is_one_clear_error(packed_output, tmp_path, capsys):
    """A folder that does not exist ended in matplotlib's FileNotFoundError traceback."""
    target = tmp_path / "no" / "such" / "x.png"
    assert main(["stats", str(packed_output), "--plot", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"easydata: error: cannot write the plot to '{target}': No such file or directory"


def test_inspect_refuses_a_negative_row_count(packed_output, capsys):
    """`inspect -n -1` showed no rows without a word."""
    with pytest.raises(SystemExit) as info:
        main(["inspect", str(packed_output), "-n", "-1"])
    assert info.value.code == 2 and "argument -n/--num-rows: must be >= 0, got -1" in capsys.readouterr().err


def test_a_long_tailed_length_distribution_is_plotted_on_log_axes(tmp_path) -> None:
    """Before: a linear axis made a long-tailed histogram one bar at 0 and an empty plot."""
    from easydata.tools.stats import length_bins

    rng = np.random.default_rng(0)
    long_tail = np.bincount(np.minimum(rng.pareto(1.2, 20000) * 50 + 1, 60000).astype(np.int64))
    edges, logarithmic = length_bins({"web": long_tail})
    assert logarithmic and edges[0] == 1 and edges[-1] == len(long_tail)
    assert np.all(np.diff(np.log(edges[edges > 10])) < 0.3)  # geometric bins: even on the log axis
    narrow = np.bincount(rng.integers(400, 600, 5000))
    edges, logarithmic = length_bins({"web": narrow})
    assert not logarithmic and edges[0] == 0
    stats = {"_histograms": {"web": long_tail}, "total": {"length": {"unit": "document"}},
             "outputs": {"web": {"token_share": 1.0, "tokens": int((np.arange(len(long_tail)) * long_tail).sum())}}}
    png = plot_stats(stats, str(tmp_path / "tail.png"))
    assert Path(png).read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("tool", ["stats", "validate"])
def test_an_interrupted_check_closes_its_progress_bar(packed_output, monkeypatch, tool) -> None:
    """`easydata stats` and `validate` closed their progress bar only when they finished: a Ctrl-C (or an error)
    left the bar open, and the message after it was drawn on the bar's line."""
    import sys

    from easydata.tools import stats, validate

    closed = []
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    monkeypatch.setattr("easydata.run.progress.count_bar", lambda *a, **k: type(
        "Bar", (), {"close": lambda self: closed.append(True), "refresh": lambda self: None, "n": 0})())

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    module, check, name = (stats, stats.compute_stats, "_measure_output") if tool == "stats" else \
        (validate, validate.validate_output, "_check_shard")
    monkeypatch.setattr(module, name, interrupted)
    with pytest.raises(KeyboardInterrupt):
        check(str(packed_output), progress=True)
    assert closed == [True]
