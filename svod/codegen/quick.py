"""The replay hot path's pieces (`QuickParts`): what a straight-line replay closure of a
graph program needs — shared by `svod.codegen.graphprog.GraphProgram`, the warm records'
runner (`svod.warmplan`) and svod.jit. Import-light (numpy, ctypes helpers): a warm
process builds its replay closures without the graph program module."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from svod.codegen.buffers import _DATA_OFFSET, _WORDS, data_address
from svod.ir import UOp


class _Count:
    """A call counter a replay closure can bump without holding its GraphProgram."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


class QuickParts(NamedTuple):
    """What a replay closure needs from a GraphProgram (`GraphProgram.quick_parts`): call
    ``segment(slots_addr, fns, None)`` with `lock` held (taken without waiting), after
    writing ``slots[i]`` for each input i (its (dtype, elements needed) in `inputs`; the
    array C-contiguous) and ``slots[slot]`` for a fresh ``np.empty(shape, dtype)`` per
    output in `outputs`, and add one to `count.n`. A closure must hold `keep` (the code,
    function table and scratch the call reads) for as long as it may call."""

    count: _Count
    keep: tuple
    slots: object
    slots_addr: int
    fns: int
    segment: object
    lock: object
    inputs: tuple
    outputs: tuple

    def call_source(self, tally, indent: str = "    ", inline_address: bool = False) -> tuple[dict, list[str]]:
        """(namespace, lines) of generated code that, with the inputs bound to `a0`, `a1`,
        ... (checked by the caller), allocates the outputs `o0`, `o1`, ..., launches the
        segment (or returns None when another thread holds the program) and counts the
        call on `tally` (a `svod.stats.Tally`, or None). `inline_address`: each data pointer
        read inline (`svod.codegen.buffers._WORDS`, when the probe found numpy's field)
        instead of by a `data_address` call."""
        ns = {"_slots": self.slots, "_saddr": self.slots_addr, "_fns": self.fns, "_segment": self.segment,
              "_acquire": self.lock.acquire, "_release": self.lock.release, "_count": self.count, "_keep": self.keep,
              "_tick": tally.tick if tally is not None else None, "_address": data_address, "_empty": np.empty}
        lines = []
        for j, (_, shape, dtype) in enumerate(self.outputs):
            ns[f"_S{j}"], ns[f"_D{j}"] = shape, dtype
            lines.append(f"{indent}o{j} = _empty(_S{j}, _D{j})")
        lines += [f"{indent}if not _acquire(False): return None", f"{indent}try:"]
        if inline_address and _WORDS is not None:
            ns["_WORDS"], ns["_OFF"] = _WORDS, _DATA_OFFSET

            def addr(v: str) -> str:
                return f"_WORDS[(id({v}) + _OFF) >> 3]"
        else:
            def addr(v: str) -> str:
                return f"_address({v})"
        lines += [f"{indent}    _slots[{i}] = {addr(f'a{i}')}" for i in range(len(self.inputs))]
        lines += [f"{indent}    _slots[{slot}] = {addr(f'o{j}')}" for j, (slot, _, _) in enumerate(self.outputs)]
        lines += [f"{indent}    _count.n += 1"] + ([f"{indent}    _tick()"] if tally is not None else [])
        lines += [f"{indent}    _segment(_saddr, _fns, None)", f"{indent}finally:", f"{indent}    _release()"]
        return ns, lines

    def hit_runner(self, tally, perm: tuple, out_dtypes: tuple, out_sigs: tuple):
        """The engine's replay of one structural signature as straight-line code:
        ``hit(leaves, roots) -> {root: BUFFER node}`` runs the program on
        ``leaves[perm[i]].array`` and wraps each output as `UOp.buffer` would, with the
        output's structural signature given (`out_sigs`: a fresh C-contiguous array of
        the output's shape and dtype has one); None when another thread holds the program
        or an input's dtype object differs (the caller takes `Executable.run`).

        Contract: only for leaves of one structural signature whose arrays this program's
        checked `runner` has accepted once. The signature fixes each leaf's dtype, shape
        and strides, so the size and C-contiguity checks of `runner` hold for every such
        call and are not repeated; the dtype object is compared still (a byte-swapped
        array maps to the same svod dtype)."""
        ns, call = self.call_source(tally, inline_address=True)
        ns.update(UOp.buffer_namespace())
        body = ["def hit(leaves, roots):"]
        for i, (want, _) in enumerate(self.inputs):
            ns[f"_W{i}"] = want
            body += [f"    a{i} = leaves[{perm[i]}].array", f"    if a{i}.dtype is not _W{i}: return None"]
        body += call
        outs = []
        for j in range(len(self.outputs)):
            ns[f"_T{j}"], ns[f"_G{j}"] = out_dtypes[j], out_sigs[j]
            body += UOp.buffer_source(f"o{j}", f"_T{j}", f"_G{j}", f"b{j}", shape=f"_S{j}")
            outs.append(f"roots[{j}]: b{j}")
        body.append("    return {" + ", ".join(outs) + "}")
        exec("\n".join(body), ns)  # noqa: S102 - our own template
        return ns.pop("hit")

    def runner(self, tally):
        """`run(arrays) -> outputs` as straight-line code for this program: None from it
        when an input needs the general path (a dtype, size or layout to convert, too few
        arrays) or another thread holds the program."""
        ns, call = self.call_source(tally)
        n = len(self.inputs)
        body = ["def run(arrays):", f"    if len(arrays) < {n}: return None"]
        for i, (want, need) in enumerate(self.inputs):
            ns[f"_W{i}"] = want
            body += [f"    a{i} = arrays[{i}]", f"    if a{i}.dtype is not _W{i} or a{i}.size < {need} "
                     f"or not a{i}.flags.c_contiguous: return None"]
        body += call
        body.append("    return [" + ", ".join(f"o{j}" for j in range(len(self.outputs))) + "]")
        exec("\n".join(body), ns)  # noqa: S102 - our own template
        return ns.pop("run")  # NOTE: left in its globals, the function would form a reference cycle


__all__ = ["QuickParts"]
