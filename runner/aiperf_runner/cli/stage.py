"""`aiperf-runner stage`: an ImageFolder data set packed into node-local shards before a run (data/shards.py),
or an existing pack verified; `--slurm` does it on every node of the current allocation at once.

`--workload llm` stages AIPerf-LLM's token shards (data/llmshards.py): `--data TEXT_FILES_OR_DIR --to DIR` writes
byte-level shards of any text and their manifest (preset `llm-bytes`); `--manifest DIR --tokenizer gpt2 --vocab
50257` writes the manifest of llm.c shards a site already has (preset `llm`); `--verify-only --to DIR` re-hashes
shards against their manifest.

Staging is not part of a run: it happens before the run's clock starts, and the time it took is printed
here, never scored. The run then reads the pack with `--data` pointing at it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from aiperf_runner.data.staging import expand, node_name
from aiperf_runner.spec.errors import AiperfError

EXIT_CODES = "Exit codes: 0 success, 1 failure (the message says why), 2 usage error."


def srun_argv(options: list[str]) -> list[str]:
    """The command that runs `stage OPTIONS` once on every node of the current SLURM allocation, in
    parallel; AiperfError outside an allocation."""
    nodes = os.environ.get("SLURM_NNODES") or os.environ.get("SLURM_JOB_NUM_NODES")
    if not os.environ.get("SLURM_JOB_ID") or not nodes:
        raise AiperfError("--slurm stages on every node of the current allocation: run it inside a SLURM "
                                "allocation (salloc, or an sbatch script), or leave --slurm out to stage here")
    return ["srun", f"--nodes={nodes}", f"--ntasks={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            sys.executable, "-m", "aiperf_runner", "stage", *options]


def _options(data: Path | None, to: str, shard_mb: int, workers: int, verify_only: bool, full: bool,
             as_json: bool, manifest_to: Path | None = None, decoded: str | None = None) -> list[str]:
    """The command's own options again (for the copy each node runs); `decoded`: the decoder of --decoded."""
    return [*(["--data", str(data.resolve())] if data else []), "--to", to, "--shard-mb", str(shard_mb),
            "--workers", str(workers), *(["--verify-only"] if verify_only else []), *(["--full"] if full else []),
            *(["--json"] if as_json else []), *(["--manifest-to", str(manifest_to.resolve())] if manifest_to else []),
            *(["--decoded", "--decoder", decoded] if decoded else [])]


def pixel_decoder(name: str) -> Any:
    """data/shards.py's PixelDecoder of the run decoder `name` (train/decode.py, which imports torch)."""
    from aiperf_runner.data.shards import PixelDecoder
    from aiperf_runner.train.decode import PIXEL_CODECS

    if name == "device":
        raise AiperfError("--decoder device decodes in the run, on the training device: a pixel pack holds the "
                          f"images of {' or '.join(PIXEL_CODECS)} (--decoder), or stage the files' bytes (no --decoded)")
    if name not in PIXEL_CODECS:
        raise AiperfError(f"--decoder {name!r}: one of {', '.join(PIXEL_CODECS)}")
    return PixelDecoder(name, PIXEL_CODECS[name][0])


def copy_manifest(pack: Path, target: Path) -> None:
    """The pack's manifest copied to `target` (shared storage the controller reads: `run --data-manifest`);
    written whole and renamed, so nodes writing the same manifest at once leave one complete copy."""
    from aiperf_runner.data import shards

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    shutil.copyfile(pack / shards.MANIFEST, tmp)
    os.replace(tmp, target)


def _report(node: str, dst: Path, manifest: dict[str, Any], packed: bool, full: bool, seconds: float) -> dict[str, Any]:
    splits = manifest["splits"].values()
    size = sum(int(sh["bytes"]) for s in splits for sh in s["shards"])
    return {"node": node, "path": str(dst), "packed": packed, "verified": "full" if full else "sizes",
            "pixels": manifest.get("pixels"),
            "images": sum(int(s["images"]) for s in splits), "shards": sum(len(s["shards"]) for s in splits),
            "bytes": size, "seconds": round(seconds, 3), "mb_per_s": round(size / 1e6 / seconds, 1) if seconds else None,
            "digest": manifest["digest"]}


def _text(r: dict[str, Any]) -> str:
    what = "packed" if r["packed"] else f"verified ({'every shard hashed' if r['verified'] == 'full' else 'sizes and index'})"
    rate = f", {r['mb_per_s']:,} MB/s" if r["packed"] and r["mb_per_s"] is not None else ""
    held = f" (images decoded by {r['pixels']})" if r.get("pixels") else ""
    return (f"node {r['node']}: {what} {r['path']}{held}: {r['images']:,} images in {r['shards']} shards, "
            f"{r['bytes'] / 1e6:,.1f} MB, {r['seconds']:.1f} s{rate}\n  digest {r['digest']}")


def _llm_report(path: Path, manifest: dict[str, Any], written: bool, seconds: float, what: str) -> dict[str, Any]:
    splits = manifest["splits"]
    return {"node": node_name(), "path": str(path), "workload": "llm", "done": what, "written": written,
            "tokenizer": manifest["tokenizer"], "vocab": manifest["vocab"],
            "shards": sum(len(s["shards"]) for s in splits.values()), "train_tokens": splits["train"]["tokens"],
            "val_tokens": splits["val"]["tokens"], "seconds": round(seconds, 3), "digest": manifest["digest"]}


def _llm_text(r: dict[str, Any]) -> str:
    return (f"node {r['node']}: {r['done']} {r['path']}: {r['shards']} shards, {r['train_tokens']:,} training and "
            f"{r['val_tokens']:,} validation tokens ({r['tokenizer']}, vocabulary {r['vocab']:,}), "
            f"{r['seconds']:.1f} s\n  digest {r['digest']}")


def _stage_llm(data: list[Path], to: str | None, manifest_dir: Path | None, tokenizer: str | None,
               vocab: int | None, val_tokens: int, verify_only: bool) -> dict[str, Any]:
    """`stage --workload llm`: shards written from text, a manifest written for shards already there, or shards
    verified against their manifest (every shard re-hashed)."""
    from aiperf_runner.data import llmshards

    start = time.monotonic()
    if manifest_dir is not None:
        if data or to:
            raise AiperfError("--manifest DIR writes the manifest of the shards in DIR: give neither --data nor --to")
        if not tokenizer:
            raise AiperfError("--manifest needs --tokenizer (gpt2 for llm.c's GPT-2 shards) and, for a tokenizer "
                              f"other than {', '.join(llmshards.TOKENIZERS)}, --vocab")
        vocab = vocab if vocab is not None else llmshards.TOKENIZERS.get(tokenizer)
        if vocab is None:
            raise AiperfError(f"tokenizer {tokenizer!r} is not known here: give its vocabulary with --vocab")
        manifest = llmshards.write_manifest(manifest_dir, tokenizer, vocab)
        return _llm_report(manifest_dir, manifest, True, time.monotonic() - start, "manifest written for")
    if to is None:
        raise AiperfError("give --to DIR (where the shards go, or which to verify), or --manifest DIR")
    dst = expand(to, node_name())
    if verify_only:
        return _llm_report(dst, llmshards.verify(dst), False, time.monotonic() - start, "verified (every shard hashed)")
    if not data:
        raise AiperfError("give --data TEXT_FILES_OR_DIR (text to stage as byte-level shards), or --verify-only, "
                          "or --manifest DIR for shards tokenised elsewhere")
    result = llmshards.write_shards(data, dst, tokenizer or "bytes", val_tokens=val_tokens)
    return _llm_report(dst, result.manifest, result.written, result.seconds,
                       "staged" if result.written else "already staged, verified")


def stage_cmd(
    to: Annotated[str | None, typer.Option("--to", metavar="LOCAL", help="Where the pack goes (node-local storage); "
                                           "%n is the node's name, %% a percent sign. --workload llm: where the "
                                           "byte-level shards go.")] = None,
    data: Annotated[list[Path] | None, typer.Option("--data", metavar="PATH", help="The ImageFolder tree to pack "
                                                    "(train/<class>/<image>, val/<class>/<image>). --workload llm: "
                                                    "text files, or directories of them (repeatable), staged as "
                                                    "byte-level shards.")] = None,
    shard_mb: Annotated[int, typer.Option("--shard-mb", metavar="N", min=1, help="Shard size in MiB.")] = 256,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Threads reading and writing.")] = 8,
    verify_only: Annotated[bool, typer.Option("--verify-only", help="Only verify the pack at --to.")] = False,
    full: Annotated[bool, typer.Option("--full", help="Verify every shard's sha256 too (reads the whole pack); "
                                       "by default sizes and the index only.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object (one per node with --slurm).")] = False,
    slurm: Annotated[bool, typer.Option("--slurm", help="Run on every node of the current SLURM allocation in "
                                        "parallel (srun, one task per node).")] = False,
    manifest_to: Annotated[Path | None, typer.Option("--manifest-to", metavar="FILE", help="Also copy the pack's "
                                                     "manifest here (shared storage), for run --data-manifest when "
                                                     "the controller cannot see the nodes' disks.")] = None,
    workload: Annotated[str, typer.Option("--workload", help="image (an ImageFolder pack) or llm (AIPerf-LLM's "
                                          "token shards and their manifest).")] = "image",
    manifest: Annotated[Path | None, typer.Option("--manifest", metavar="DIR", help="--workload llm: write the "
                                                  "manifest of the llm.c .bin shards already in DIR (a name with "
                                                  "'val' in it: a validation shard), every shard hashed.")] = None,
    tokenizer: Annotated[str | None, typer.Option("--tokenizer", metavar="NAME", help="--workload llm: the shards' "
                                                  "tokenizer: bytes (the default with --data: a token is a byte) "
                                                  "or, with --manifest, the one that made them (gpt2 for llm.c's "
                                                  "GPT-2 shards).")] = None,
    vocab: Annotated[int | None, typer.Option("--vocab", min=1, max=65536, help="--workload llm --manifest: the "
                                              "tokenizer's vocabulary (default: gpt2 50257, bytes 256).")] = None,
    decoded: Annotated[bool, typer.Option("--decoded", help="Store each image decoded (its pixels, by --decoder) "
                                          "instead of its file's bytes: no decoding in the run, about 6x the disk "
                                          "of ImageNet's JPEGs; the run must decode with the same decoder.")] = False,
    decoder: Annotated[str | None, typer.Option("--decoder", metavar="NAME", help="--decoded: tensor or pil, the run "
                                                "decoder whose images are stored (default: $AIPERF_DATA_DECODER, "
                                                "else tensor).")] = None,
    val_tokens: Annotated[int, typer.Option("--val-tokens", metavar="N", min=1, help="--workload llm --data: the "
                                            "first N bytes of the text are the validation shard (llm-bytes "
                                            "evaluates 65,536).")] = 65_536,
) -> None:
    """Pack an ImageFolder data set into a few large shards with a manifest on node-local storage (or verify a
    pack there), before a run: then `run --data LOCAL` reads the shards. A pack already at --to is verified,
    not rewritten. --decoded stores the images decoded, so the run's loaders do not decode. With --workload
    llm: AIPerf-LLM's token shards (byte-level shards of text, or the manifest of llm.c shards a site has) for
    `run --workload llm --preset llm|llm-bytes --data DIR`."""
    if workload == "llm":
        if slurm or manifest_to is not None or decoded or decoder is not None:
            raise AiperfError("--slurm, --manifest-to, --decoded and --decoder are for image packs: token shards are "
                              "read where they are, and never decoded")
        report = _stage_llm(data or [], to, manifest, tokenizer, vocab, val_tokens, verify_only)
        typer.echo(json.dumps(report) if as_json else _llm_text(report))
        return
    if workload != "image":
        raise AiperfError(f"unknown --workload {workload!r}: image or llm")
    if manifest is not None or tokenizer is not None or vocab is not None:
        raise AiperfError("--manifest, --tokenizer and --vocab are for --workload llm")
    if decoder is not None and not decoded:
        raise AiperfError("--decoder names the decoder of --decoded: give --decoded too")
    from aiperf_runner.rundir.config import DECODER_ENV, DEFAULT_DATA_DECODER

    decoded_by = (decoder or os.environ.get(DECODER_ENV) or DEFAULT_DATA_DECODER) if decoded else None
    from aiperf_runner.data import shards  # numpy: not at the command line's start

    if to is None:
        raise AiperfError("give --to LOCAL (where the pack goes)")
    if data is not None and len(data) > 1:
        raise AiperfError("give one --data DIR (the ImageFolder tree to pack)")
    tree = data[0] if data else None
    if not verify_only and tree is None:
        raise AiperfError("give --data DIR (the ImageFolder tree to pack), or --verify-only")
    if slurm:
        argv = srun_argv(_options(tree, to, shard_mb, workers, verify_only, full, as_json, manifest_to, decoded_by))
        raise typer.Exit(subprocess.run(argv, check=False).returncode)
    node = node_name()
    dst = expand(to, node)
    start = time.monotonic()
    if verify_only:
        if not dst.exists():
            raise shards.ShardError(f"{dst}: no pack there")
        report = _report(node, dst, shards.verify(dst, full=full), False, full, time.monotonic() - start)
    else:
        assert tree is not None
        result = shards.pack(tree, dst, shard_bytes=shard_mb << 20, workers=workers, full=full,
                             pixels=pixel_decoder(decoded_by) if decoded_by else None)
        report = _report(node, dst, result.manifest, result.packed, full, result.seconds)
    if manifest_to is not None:
        copy_manifest(dst, manifest_to)
    typer.echo(json.dumps(report) if as_json else _text(report))


def register(app: typer.Typer) -> None:
    app.command("stage", epilog=EXIT_CODES)(stage_cmd)
