"""`easydata inspect`: a manifest summary plus a few decoded rows, segment boundaries visible.

Reads only the first record batch(es) of the first shard of each dataset, so it is instant on any
output size. Decoding uses the tokenizer recorded in the manifest when it is available locally;
otherwise raw ids are shown.
"""

from __future__ import annotations

from typing import Any, Optional

from easydata.figures import count
from easydata.io.field_values import python_values
from easydata.io.formats import iter_shard_batches
from easydata.run.manifest import member_path, read_manifest

__all__ = ["inspect_output"]

_SEGMENT_MARK = " ‖ "
_MAX_CHARS = 600


def _decoder(manifest: dict[str, Any]) -> Optional[Any]:
    name = (manifest.get("tokenizer") or {}).get("name_or_path")
    if not name:
        return None
    try:
        from easydata.text.tokenizer import load_tokenizer

        return load_tokenizer(name)
    except Exception:  # the tokenizer may live on another machine: fall back to raw ids
        return None


#: Around the tokens a row trains on (`loss_mask` 1), in a row that has a loss mask.
TRAINED_OPEN, TRAINED_CLOSE = "⟦", "⟧"


def _render(row: dict[str, Any], tokenizer: Any) -> str:
    ids = row["input_ids"]
    segments = row.get("segment_ids") or [1] * len(ids)
    mask = row.get("loss_mask")
    trained = mask if mask is not None else [0] * len(ids)
    segment_texts, start = [], 0
    for i in range(1, len(ids) + 1):  # split at segment changes; padding (segment 0) shown as a count
        if i == len(ids) or segments[i] != segments[start]:
            if segments[start] == 0:
                segment_texts.append(f"<{i - start} pad>")
            else:  # and within a segment at loss-mask changes: trained spans marked
                parts, at = [], start
                for j in range(start + 1, i + 1):
                    if j == i or trained[j] != trained[at]:
                        text = _decode(ids[at:j], tokenizer)
                        parts.append(f"{TRAINED_OPEN}{text}{TRAINED_CLOSE}" if trained[at] else text)
                        at = j
                segment_texts.append("".join(parts))
            start = i
    text = _SEGMENT_MARK.join(segment_texts)
    return text if len(text) <= _MAX_CHARS else text[:_MAX_CHARS] + f"… (+{len(text) - _MAX_CHARS} chars)"


def _decode(ids: list[int], tokenizer: Any) -> str:
    return tokenizer.decode(ids) if tokenizer is not None else " ".join(map(str, ids))


def inspect_output(output_dir: str, num_rows: int = 3) -> str:
    """Returns a human-readable summary of an output and `num_rows` decoded rows per dataset."""
    manifest = read_manifest(output_dir)
    tok = manifest.get("tokenizer") or {}
    totals = manifest.get("totals") or {}
    schema = manifest.get("schema") or {}
    lines = [
        f"output:     {output_dir}",
        f"created:    {manifest.get('created_at')}  (format_version {manifest.get('format_version')})",
        f"format:     {manifest.get('format')} / {manifest.get('compression')}",
        f"tokenizer:  {tok.get('name_or_path')}  vocab {tok.get('vocab_size')}  bos {tok.get('bos_token_id')}"
        f"  eos {tok.get('eos_token_id')}  pad {tok.get('pad_token_id')}",
        f"schema:     {', '.join(schema.get('columns', {}))}  packed={schema.get('packed')}"
        f"  seq_length={schema.get('seq_length')}",
        f"totals:     {count(totals.get('rows', 0), 'row')}, {count(totals.get('tokens', 0), 'token')},"
        f" {count(totals.get('shards', 0), 'shard')}; documents in {manifest.get('documents_in', 0):,},"
        f" written {manifest.get('documents_written', 0):,}, rejected {manifest.get('documents_rejected', 0):,}",
    ]
    mix = manifest.get("mix")
    if mix:
        lines.append(f"mix:        {mix.get('stop_strategy')}"
                     + (f", total_tokens {mix['total_tokens']:,}" if mix.get("total_tokens") else "")
                     + f"; {mix.get('tokens_out', 0):,} tokens out")
        for source, info in sorted((mix.get("sources") or {}).items()):
            lines.append(f"  {source}: target {100 * mix['target_weights'].get(source, 0):.2f}%, realized"
                         f" {100 * info.get('realized_token_share', 0):.2f}%, repeat x{info.get('repeat_factor')},"
                         f" {info.get('documents_selected', 0):,} of {info.get('documents_mixed', 0):,} documents used")
    tokenizer = _decoder(manifest) if num_rows > 0 else None
    for name, output in sorted(manifest.outputs.items()):
        lines.append(f"\n[{name}] {count(len(output.shards), 'shard')}, {count(output.rows, 'row')},"
                     f" {count(output.tokens, 'token')}")
        if not output.shards or num_rows <= 0:
            continue
        shown = 0
        for batch in iter_shard_batches(member_path(output_dir, output.shards[0].path, "shard path"), manifest.format):
            rows = batch.slice(0, num_rows - shown)
            for row in (dict(zip(rows.schema.names, values)) for values in zip(*map(python_values, rows.columns))):
                extras = {k: v for k, v in row.items() if k not in ("input_ids", "attention_mask", "loss_mask",
                                                                     "segment_ids", "positions")}
                header = f"  row {shown}: {len(row['input_ids'])} tokens"
                if extras:
                    header += "  " + "  ".join(f"{k}={str(v)[:60]!s}" for k, v in extras.items())
                lines.append(header)
                lines.append("    " + _render(row, tokenizer).replace("\n", "\n    "))
                shown += 1
            if shown >= num_rows:
                break
    if tokenizer is None and num_rows > 0:
        lines.append("\n(tokenizer not available here: showing token ids)")
    if num_rows > 0 and "loss_mask" in (schema.get("columns") or {}):
        lines.append(f"\n({TRAINED_OPEN}...{TRAINED_CLOSE}: the tokens a row trains on, loss_mask 1)")
    return "\n".join(lines)
