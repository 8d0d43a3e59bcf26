"""LLVM code generation for svod (llvmlite): the decisions in ``schedule`` (pure), emission
in ``lower`` and its parts, JIT lifecycle in ``jit``, vector math in ``vecmath``.

Kept import-light: ``import svod.codegen`` does not load llvmlite; import the
submodules (``svod.codegen.jit``, ``svod.codegen.vecmath``) where they are needed.
"""
