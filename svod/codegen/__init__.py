"""LLVM code generation for svod (llvmlite): JIT lifecycle in ``jit``, vector math in ``vecmath``.

Kept import-light: ``import svod.codegen`` does not load llvmlite; import the
submodules (``svod.codegen.jit``, ``svod.codegen.vecmath``) where they are needed.
"""
