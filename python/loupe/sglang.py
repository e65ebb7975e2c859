"""Reading SGLang's dumper output (``sglang.srt.debug_utils.dumper``) as loupe dumps.

SGLang's dumper writes, per dumped value, one ``torch.save`` file into one directory shared by
every rank::

    DIR/step=S___rank=R___dump_index=I___name=N___[more tags, e.g. layer_id=L].pt

holding ``{"value": tensor, "meta": {...}}``: the meta repeats the tags and adds ``world_rank``,
``world_size``, ``sglang_parallel_info`` (``tp_rank``, ``tp_size``, ``attn_cp_rank``, ...) and, when
the caller gave one, ``dims``: the tensor's axes with the parallel groups that cut them, e.g.
``"t h[tp] d"``, ``"t[cp:zigzag] d"``, ``"t d[tp:partial]"``.

``convert(src, out)`` (or ``python3 -m loupe.sglang SRC OUT``) rewrites such a directory into
loupe's sharded layout, ``OUT/rank-<r>/<name>.step<s>.safetensors`` with ``manifest.txt`` in
dump order and the metadata ``loupe diff`` unshards by (``loupe.dims``, ``loupe.parallel``,
``loupe.rank``, ``loupe.rank.<group>``, ``loupe.step``); then ``loupe diff OUT_A OUT_B`` puts each
tensor back together as ``--dims`` would and names the rank and range that diverge
(docs/sharded-diff.md). The dims grammar maps ``axis[group]`` to ``axis(group)``,
``[cp:zigzag]`` to ``(cp,zigzag)`` and ``[tp:partial]`` to ``(tp,partial)``; a fused axis
``(a*b)``, a squeezed axis or a group loupe does not unshard (pp, etp, ...) is an error naming
the file.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Dict, List, Optional, Tuple

from ._errors import InputError, UsageError

# Tags that say where and when a value was dumped, not which value it is.
_PLACE_TAGS = {"step", "rank", "dump_index", "recompute_status", "pp_rank", "tp_rank", "cp_rank",
               "ep_rank", "etp_rank"}
# SGLang's axis names → loupe's groups, and where SGLang's parallel info keeps each one's
# rank and size.
_GROUPS = {"tp": ("tp_rank", "tp_size"), "cp": ("attn_cp_rank", "attn_cp_size"),
           "ep": ("moe_ep_rank", "moe_ep_size"), "dp": ("attn_dp_rank", "attn_dp_size"),
           "sp": ("tp_rank", "tp_size")}
_DIM = re.compile(r"^(?P<name>[A-Za-z_]\w*)(?:\[(?P<modifiers>[^\]]+)\])?$")


def parse_file_name(file_name: str) -> List[Tuple[str, str]]:
    """``"step=0___rank=1___name=x.pt"`` → ``[("step", "0"), ("rank", "1"), ("name", "x")]``."""
    if not file_name.endswith(".pt"):
        raise InputError("%s: expected a .pt file" % file_name)
    tags = []
    for part in file_name[:-3].split("___"):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise InputError("%s: tag %r is not KEY=VALUE; expected SGLang's dumper names "
                             "(step=S___rank=R___dump_index=I___name=N...)" % (file_name, part))
        tags.append((key, value))
    return tags


def loupe_dims(spec: str, where: str) -> Tuple[str, List[str]]:
    """SGLang's dims (``"t h[tp] d[tp:partial]"``) → loupe's (``"t h(tp) d(tp,partial)"``) and
    the groups it names."""
    tokens = []
    groups: List[str] = []
    for token in spec.split():
        match = _DIM.match(token)
        if match is None:
            raise InputError("%s: dims %r: axis %r is not NAME or NAME[GROUP,...]; loupe does not "
                             "unshard fused or squeezed axes" % (where, spec, token))
        modifiers = match.group("modifiers")
        if not modifiers:
            tokens.append(match.group("name"))
            continue
        words = []
        for modifier in (m.strip() for m in modifiers.split(",")):
            axis, _, qualifiers = modifier.partition(":")
            axis = axis.strip()
            if axis not in _GROUPS:
                raise InputError("%s: dims %r: group %r; loupe unshards tp, cp, ep, sp and dp"
                                 % (where, spec, axis))
            words.append(axis)
            groups.append(axis)
            for qualifier in (q.strip() for q in qualifiers.split("+") if q.strip()):
                if qualifier == "sharded":
                    continue
                if qualifier not in ("zigzag", "natural", "partial"):
                    raise InputError("%s: dims %r: qualifier %r; loupe knows zigzag, natural "
                                     "and partial" % (where, spec, qualifier))
                words.append(qualifier)
        tokens.append("%s(%s)" % (match.group("name"), ",".join(words)))
    return " ".join(tokens), groups


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=\-]", "_", text)


def convert(src: Any, out: Any) -> Dict[str, Any]:
    """Rewrites an SGLang dumper directory into loupe's sharded layout; returns
    ``{"ranks": N, "tensors": M, "steps": [...]}``.

    Example::

        loupe.sglang.convert("/tmp/dumper/dump_a", "/tmp/loupe_a")
        loupe.sglang.convert("/tmp/dumper/dump_b", "/tmp/loupe_b")
        # then: loupe diff /tmp/loupe_a /tmp/loupe_b
    """
    import torch

    from .dump import write_safetensors

    src, out = os.fspath(src), os.fspath(out)
    if not os.path.isdir(src):
        raise UsageError("%s: not a directory" % src, "pass the dumper's experiment directory "
                         "(DUMPER_DIR/EXP_NAME)")
    files = sorted(name for name in os.listdir(src) if name.endswith(".pt"))
    if not files:
        raise InputError("%s: no .pt files; expected SGLang dumper output" % src)
    records = []
    for file_name in files:
        tags = parse_file_name(file_name)
        path = os.path.join(src, file_name)
        try:
            loaded = torch.load(path, map_location="cpu")
        except Exception as error:  # torch raises many kinds; the file is what failed
            raise InputError("%s: torch.load failed: %s" % (path, error)) from None
        if not (isinstance(loaded, dict) and "value" in loaded and "meta" in loaded):
            raise InputError("%s: expected {'value': tensor, 'meta': {...}} (SGLang's dumper)"
                             % path)
        value, meta = loaded["value"], loaded["meta"]
        if not isinstance(value, torch.Tensor):
            continue  # a non-tensor value (a dict of config, a list): nothing to compare
        tag = dict(tags)
        for key in ("step", "rank", "dump_index"):
            if key not in tag:
                raise InputError("%s: the name has no %s= tag" % (path, key))
        identity = [(k, v) for k, v in tags if k not in _PLACE_TAGS]
        name = "___".join("%s=%s" % (k, v) if k != "name" else v for k, v in identity)
        records.append((int(tag["rank"]), int(tag["step"]), int(tag["dump_index"]), name, value,
                        meta, path))
    ranks = sorted({record[0] for record in records})
    if ranks != list(range(len(ranks))):
        raise InputError("%s: ranks %s; expected 0..N-1 without a gap" % (src, ranks))
    manifests: Dict[int, List[str]] = {rank: [] for rank in ranks}
    steps = set()
    for rank, step, _index, name, value, meta, path in sorted(records, key=lambda r: (r[0], r[2])):
        directory = os.path.join(out, "rank-%d" % rank)
        os.makedirs(directory, exist_ok=True)
        metadata = {"loupe.rank": str(rank), "loupe.step": str(step)}
        info = meta.get("sglang_parallel_info") or {}
        if meta.get("dims"):
            dims, groups = loupe_dims(str(meta["dims"]), path)
            metadata["loupe.dims.value"] = dims
            sizes = []
            for group in dict.fromkeys(groups):
                rank_key, size_key = _GROUPS[group]
                if rank_key not in info or size_key not in info:
                    raise InputError("%s: dims %r name %s, but meta.sglang_parallel_info has no %s "
                                     "and %s" % (path, meta["dims"], group, rank_key, size_key))
                sizes.append("%s=%d" % (group, int(info[size_key])))
                metadata["loupe.rank.%s" % group] = str(int(info[rank_key]))
            world = int(meta.get("world_size", len(ranks)))
            product = 1
            for size in sizes:
                product *= int(size.split("=")[1])
            if product != world and world % product == 0:
                sizes.append("dp=%d" % (world // product))  # the rest of the world replicates
            metadata["loupe.parallel"] = ",".join(sizes)
        file_name = "%s.step%d.safetensors" % (_safe(name), step)
        write_safetensors(os.path.join(directory, file_name), {"value": value}, metadata)
        manifests[rank].append(file_name + ":value")
        steps.add(step)
    for rank, names in manifests.items():
        with open(os.path.join(out, "rank-%d" % rank, "manifest.txt"), "w") as handle:
            handle.write("# loupe.sglang.convert: SGLang dumper values in dump order\n")
            for name in names:
                handle.write(name + "\n")
    return {"ranks": len(ranks), "tensors": len(records), "steps": sorted(steps)}


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python3 -m loupe.sglang SGLANG_DUMP_DIR OUT_DIR", file=sys.stderr)
        return 2
    try:
        summary = convert(args[0], args[1])
    except (InputError, UsageError) as error:
        print("loupe.sglang: %s" % error, file=sys.stderr)
        return 2
    print("%d tensors of %d rank(s), steps %s -> %s" % (
        summary["tensors"], summary["ranks"], summary["steps"], args[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
