"""Encode a GraphKey into egglog (linear time) and saturate it under limits: iterations,
e-nodes (checked between iterations) and wall time. Every run returns a
`SaturationReport` saying why it stopped.

>>> import svod
>>> from svod.key import compact
>>> from svod.config import SearchLimits
>>> key = compact([svod.exp(svod.ones(4) * 2).uop])[0]
>>> enc = encode(key)
>>> saturate(enc, SearchLimits()).stop_reason
'saturated'
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field

from egglog import bindings

from search import contract, rules
from search.language import DECLARATIONS, HANDLES, Templates, fed_rulesets, flist, swaps_last
from search.language import const_kind as _const_kind
from svod.config import SearchLimits
from svod.ir import Ops
from svod.key import GraphKey

CHUNK = 50  # actions per encoding rule (13.2 is quadratic in top-level commands)


@dataclass
class SaturationReport:
    stop_reason: str  # "saturated" | "iteration limit" | "e-node limit" | "time limit"
    iterations: int
    enodes: int
    seconds: float
    encode_seconds: float
    rulesets: tuple[str, ...] = ()
    sizes: list[int] = field(default_factory=list)  # e-nodes after each iteration
    added: dict[str, int] = field(default_factory=dict)  # rule set -> e-nodes it added (all iterations)

    @property
    def fired(self) -> tuple[str, ...]:
        """The rule sets that added e-nodes."""
        return tuple(n for n in self.rulesets if self.added.get(n, 0) > 0)

    def __str__(self) -> str:
        fired = ", ".join(f"{n} +{self.added[n]}" for n in self.fired) or "none"
        return (f"saturation: {self.stop_reason} after {self.iterations} iteration(s), {self.enodes} e-nodes, "
                f"{self.seconds * 1e3:.1f} ms (+{self.encode_seconds * 1e3:.1f} ms encode); "
                f"rule sets: {', '.join(self.rulesets)}; fired (e-nodes added): {fired}")


@dataclass
class Encoded:
    egraph: object  # egglog bindings.EGraph
    key: GraphKey
    rulesets: tuple[str, ...]
    text: list[str] = field(default_factory=list)  # the encoding, for explain
    templates: Templates | None = None  # the templates the fact hooks added (search.language)

    def run(self, source: str):
        return self.egraph.run_program(*self.egraph.parse_program(source))

    def serialize(self) -> dict:
        return json.loads(self.egraph.serialize([]).to_json())

    def size(self) -> int:
        out = self.run("(print-size)")
        return sum(n for name, n in out[0].sizes if name not in ("Node", "Body"))


_local = threading.local()  # egglog e-graphs must stay on the thread that made them


def _base(rulesets: tuple[str, ...]):
    """An e-graph with the language, facts and rule sets declared, built once per thread
    (declaring the rules is not free: docs/ops.md); each search works inside a push/pop on it."""
    bases = getattr(_local, "bases", None)
    if bases is None:
        bases = _local.bases = {}
    eg = bases.get(rulesets)
    if eg is None:
        eg = bindings.EGraph()
        eg.run_program(*eg.parse_program(DECLARATIONS + rules.facts() + "\n" + rules.program(rulesets)
                                         + "\n(ruleset encode)"))
        bases[rulesets] = eg
    return eg


@contextlib.contextmanager
def session(rulesets=rules.DEFAULT):
    """This thread's declared e-graph for one search (push on entry, pop on exit)."""
    eg = _base(tuple(rulesets))
    eg.run_program(*eg.parse_program("(push)"))
    try:
        yield eg
    finally:
        eg.run_program(*eg.parse_program("(pop)"))


def encode(key: GraphKey, rulesets=rules.DEFAULT, egraph=None) -> Encoded:
    """Each node its own kernel: (Node i) = (Kernel (E op i [(Load (Node src)) ...])).

    `egraph` is a declared e-graph from `session()`; without one a fresh e-graph is made."""
    if egraph is None:
        egraph = bindings.EGraph()
        egraph.run_program(*egraph.parse_program(DECLARATIONS + rules.facts() + "\n" + rules.program(rulesets)
                                                 + "\n(ruleset encode)"))
    eg = egraph
    enc = Encoded(eg, key, tuple(rulesets))
    actions = []
    for i, n in enumerate(key.nodes):
        if n.op is Ops.BUFFER:
            actions.append(f"(union (Node {i}) (Input {n.arg[0]}))")
            continue
        body = f'(E "{n.op.value}" {i} {flist([f"(Load (Node {s}))" for s in n.src])})'
        actions.append(f"(union (Body {i}) {body})")
        actions.append(f"(union (Node {i}) (Kernel (Body {i})))")
        if n.op is Ops.PERMUTE:
            inv = [0] * len(n.arg)
            for j, a in enumerate(n.arg):
                inv[a] = j
            actions.append(f'(PermIs {i} "{",".join(map(str, n.arg))}")')
            actions.append(f'(PermInvIs {i} "{",".join(map(str, inv))}")')
            if swaps_last(n.arg):
                actions.append(f"(SwapLast {i})")
        if n.op is Ops.REDUCE and n.arg[0] == "sum" and n.dtype.is_float:
            x = key.nodes[n.src[0]]
            if x.dtype == n.dtype:
                actions.append(f'(SumIs {i} "{n.arg[1]}|{x.shape}|{n.dtype}")')
        kind = _const_kind(key, i)
        if kind is not None:
            actions.append(f'(ConstIs (Body {i}) "{kind}")')
            actions.append(f'(ConstIs (Load (Node {i})) "{kind}")')
    enc.key, more = contract.encode_actions(key, rulesets)  # contraction templates (search/contract.py)
    actions += more
    # fact hooks (rules with new arguments), over the written program's nodes, their
    # templates numbered after contract's; rule sets gated on facts the graph did not
    # get are not run (search.language.GATED)
    enc.templates, more, enc.rulesets = fed_rulesets(enc.key, tuple(rulesets), upto=len(key.nodes))
    actions += more
    cmds = []
    for c in range(0, len(actions), CHUNK):
        text = "(rule () (" + "\n".join(actions[c:c + CHUNK]) + ") :ruleset encode)"
        enc.text.append(text)
        cmds += eg.parse_program(text)
    eg.run_program(*cmds)
    enc.run("(run encode 1)")
    return enc


def saturate(enc: Encoded, limits: SearchLimits, encode_seconds: float = 0.0, on_iteration=None) -> SaturationReport:
    """Run the rule sets one iteration at a time until nothing changes or a limit hits;
    `on_iteration(enc)` is called after each (the viewer serialises the e-graph there)."""
    # one iteration = each rule set once, in order (as one `run-schedule` of them all), with
    # the e-graph's size after each: one call into egglog per iteration
    text = "\n".join(f"{rules.schedule((n,))}\n(print-size)" for n in enc.rulesets)
    step = enc.egraph.parse_program(text)
    t0 = time.perf_counter()
    sizes: list[int] = []
    added = {n: 0 for n in enc.rulesets}
    reason = "iteration limit"
    it = 0
    size = enc.size()
    while it < limits.iterations:
        updated = False
        j = 0  # the rule set whose run and size the outputs give next
        for o in enc.egraph.run_program(*step):
            rep = getattr(o, "report", None)
            if rep is not None:
                updated |= bool(rep.updated)
            elif getattr(o, "sizes", None) is not None and j < len(enc.rulesets):
                new = sum(k for name, k in o.sizes if name not in HANDLES)
                added[enc.rulesets[j]] += new - size
                size = new
                j += 1
        it += 1
        sizes.append(size)
        if on_iteration is not None:
            on_iteration(enc)
        if not updated:
            reason = "saturated"
            break
        if sizes[-1] > limits.enodes:
            reason = "e-node limit"
            break
        if time.perf_counter() - t0 > limits.seconds:
            reason = "time limit"
            break
    return SaturationReport(reason, it, sizes[-1] if sizes else enc.size(), time.perf_counter() - t0,
                            encode_seconds, enc.rulesets, sizes, added)
