"""``loupe.compare_generations``: where two generations first pick different tokens, and whether
that is a tie-break (the top-2 logits were within a bound of each other in both runs) or a real
divergence (then, given the runs' dumps, the first tensor upstream that diverges).

Each run is given as logits ``[T, V]`` (tokens are their argmax), or a dict with ``logits``
(``[T, V]``) or ``topk_logits`` and ``topk_ids`` (``[T, k]``, k >= 2, any order), and optionally
``tokens`` (``[T]``, the tokens actually sampled; default: the top-1 of each position). Arrays are
numpy arrays or torch tensors (CPU or CUDA, any float dtype).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Tuple

import numpy as np

from ._errors import InputError, UsageError

DEFAULT_TIE_BOUND = 1e-3


@dataclass
class _Run:
    ids: np.ndarray  # [T, k] candidate token ids, best first
    logits: np.ndarray  # [T, k] their logits (float64), descending
    tokens: np.ndarray  # [T] the tokens chosen


@dataclass
class GenerationComparison:
    """What :func:`compare_generations` found.

    ``position``: the first position whose tokens differ (None when the generations agree over
    their common length); ``token_a``/``token_b``: the tokens chosen there; ``runner_up_a``/
    ``runner_up_b``: each run's second choice; ``margin_a``/``margin_b``: each run's top-1 minus
    top-2 logit there; ``verdict``: "tie-break", "real" or "same"; ``bound``: the margin below which
    a flip is a tie-break; ``first_divergent_tensor``: with ``dumps`` and a real verdict, the first
    tensor past tolerance in the dumps (``upstream`` holds that :class:`loupe.DiffResult`);
    ``sentence``: one line saying all of it.

    Example::

        g = loupe.compare_generations(run_tp1, run_tp2)
        print(g.sentence)  # first divergent position 17: A picks 314, B picks 271; ...
    """

    position: Optional[int]
    length: int
    token_a: Optional[int]
    token_b: Optional[int]
    runner_up_a: Optional[int]
    runner_up_b: Optional[int]
    margin_a: Optional[float]
    margin_b: Optional[float]
    verdict: str
    bound: float
    first_divergent_tensor: Optional[str]
    upstream: Any
    sentence: str

    def __bool__(self) -> bool:
        return self.verdict != "real"


def _array(value: Any, what: str) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor: float32 on the host
        value = value.detach().float().cpu().numpy() if value.is_floating_point() \
            else value.detach().cpu().numpy()
    try:
        return np.asarray(value)
    except Exception as error:  # anything numpy cannot read
        raise InputError("%s: cannot be read as an array: %s" % (what, error),
                         "pass a numpy array or a torch tensor") from None


def _run(value: Any, side: str) -> _Run:
    if isinstance(value, dict):
        unknown = set(value) - {"logits", "topk_logits", "topk_ids", "tokens"}
        if unknown:
            raise UsageError("%s: unknown keys %s; expected logits, or topk_logits and topk_ids, "
                             "and optionally tokens" % (side, sorted(unknown)))
        entries = value
    else:
        entries = {"logits": value}
    if "logits" in entries:
        logits = _array(entries["logits"], side + " logits").astype(np.float64)
        if logits.ndim != 2 or logits.shape[1] < 2:
            raise InputError("%s logits: shape %s; expected [T, V] with V >= 2" % (
                side, tuple(logits.shape)), "one row of logits per generated position")
        order = np.argsort(-logits, axis=1, kind="stable")[:, :2]
        ids = order
        top = np.take_along_axis(logits, order, axis=1)
    elif "topk_logits" in entries and "topk_ids" in entries:
        top_all = _array(entries["topk_logits"], side + " topk_logits").astype(np.float64)
        ids_all = _array(entries["topk_ids"], side + " topk_ids").astype(np.int64)
        if top_all.ndim != 2 or top_all.shape != ids_all.shape or top_all.shape[1] < 2:
            raise InputError("%s: topk_logits %s and topk_ids %s; expected the same shape [T, k], "
                             "k >= 2" % (side, tuple(top_all.shape), tuple(ids_all.shape)),
                             "pass the top-k logits and their token ids per position")
        order = np.argsort(-top_all, axis=1, kind="stable")[:, :2]
        top = np.take_along_axis(top_all, order, axis=1)
        ids = np.take_along_axis(ids_all, order, axis=1)
    else:
        raise UsageError("%s: expected logits [T, V], or topk_logits and topk_ids [T, k]" % side,
                         "e.g. {\"topk_logits\": values, \"topk_ids\": indices} from torch.topk")
    if "tokens" in entries:
        tokens = _array(entries["tokens"], side + " tokens").astype(np.int64).reshape(-1)
        if tokens.shape[0] != top.shape[0]:
            raise InputError("%s: %d tokens for %d positions of logits; expected one per "
                             "position" % (side, tokens.shape[0], top.shape[0]),
                             "pass the tokens sampled at the positions the logits are for")
    else:
        tokens = ids[:, 0].copy()
    return _Run(ids.astype(np.int64), top, tokens)


def compare_generations(a: Any, b: Any, *, bound: float = DEFAULT_TIE_BOUND,
                        dumps: Optional[Tuple[Any, Any]] = None,
                        **diff_options: Any) -> GenerationComparison:
    """Compare two generations of the same prompt (A the candidate, B the reference).

    The first position whose tokens differ is the first divergent position. Its verdict is
    **tie-break** when each run's token is the other run's runner-up and both runs' top-2 margins
    (top-1 minus top-2 logit) are below ``bound`` (default 1e-3): numerical noise of that size
    picks either token. Otherwise it is **real**; with ``dumps=(dir_a, dir_b)`` (the runs' tensor
    dumps, anything :func:`loupe.diff` takes) the first tensor past tolerance there is named
    (``diff_options`` go to :func:`loupe.diff`, e.g. ``rules=``). "same" when no position differs.

    Example::

        >>> g = loupe.compare_generations({"logits": la}, {"logits": lb})
        >>> g.verdict, g.position, g.margin_a
        ('tie-break', 17, 0.0004)
    """
    if not (bound >= 0) or math.isinf(bound):
        raise UsageError("bound=%r: expected a finite margin >= 0" % (bound,),
                         "e.g. bound=1e-3 (logits units)")
    run_a, run_b = _run(a, "A"), _run(b, "B")
    length = min(run_a.tokens.shape[0], run_b.tokens.shape[0])
    differing = np.flatnonzero(run_a.tokens[:length] != run_b.tokens[:length])
    if differing.size == 0:
        return GenerationComparison(None, length, None, None, None, None, None, None, "same",
                                    bound, None, None,
                                    "the generations agree on all %d common positions" % length)
    position = int(differing[0])
    token_a, token_b = int(run_a.tokens[position]), int(run_b.tokens[position])
    runner_a, runner_b = int(run_a.ids[position, 1]), int(run_b.ids[position, 1])
    if token_a != int(run_a.ids[position, 0]):  # sampled, not the top-1: its runner-up is top-1
        runner_a = int(run_a.ids[position, 0])
    if token_b != int(run_b.ids[position, 0]):
        runner_b = int(run_b.ids[position, 0])
    margin_a = float(run_a.logits[position, 0] - run_a.logits[position, 1])
    margin_b = float(run_b.logits[position, 0] - run_b.logits[position, 1])
    swapped = runner_a == token_b and runner_b == token_a
    tie = swapped and margin_a < bound and margin_b < bound
    verdict = "tie-break" if tie else "real"
    sentence = ("first divergent position %d: A picks %d (runner-up %d, margin %.3g), B picks %d "
                "(runner-up %d, margin %.3g): " % (position, token_a, runner_a, margin_a, token_b,
                                                   runner_b, margin_b))
    if tie:
        sentence += "tie-break (both margins below %.3g)" % bound
    elif swapped:
        sentence += "real (a margin is %.3g or more)" % bound
    else:
        sentence += "real (the runs' choices are not each other's runner-up)"
    first_tensor, upstream = None, None
    if dumps is not None and not tie:
        from ._diff import diff

        upstream = diff(dumps[0], dumps[1], **diff_options)
        first_tensor = upstream.first_divergence
        if first_tensor is None and upstream.worst_names:
            first_tensor = upstream.worst_names[0]
        sentence += "; first divergent tensor upstream: %s" % (first_tensor or "none")
    return GenerationComparison(position, length, token_a, token_b, runner_a, runner_b, margin_a,
                                margin_b, verdict, bound, first_tensor, upstream, sentence)

