"""`prefetch(arr, i)`: a software prefetch of `arr.flat[i]` for the Numba kernels (the trace
generators, the policies, the timing layer's passes: it lives in the lowest layer using it).

Why: once a cache's maps outgrow the last-level cache (10% of 10M rows: a 32 MB row -> slot
map), every access pays a dependent DRAM miss for its hash bucket, and the out-of-order core
cannot look far enough ahead to overlap them. The bucket depends only on the id, which the
kernel already holds for the whole chunk, so the kernels prefetch the bucket of the access a
few positions ahead (and, one stage later, the slot it maps to). A prefetch is only a hint:
it never faults and never changes a result, so a stale guess costs nothing but bandwidth.

`i` indexes the array's flat C-order buffer (no bounds check: callers pass an index inside
the array). Compiles to LLVM's `llvm.prefetch` (read, high locality, data cache). Called from
pure Python (`NUMBA_DISABLE_JIT=1`, to step through a kernel in a debugger) it does nothing:
a hint has no result to reproduce.
"""

from __future__ import annotations

from typing import Any

from scratchpipe_sim.traces._jit import on_numba


def prefetch(arr: Any, idx: int) -> None:
    """Hint the CPU to bring `arr.flat[idx]` into cache (C-contiguous arrays only).

    This body runs only in pure Python, where there is nothing to hint; compiled kernels get
    the `overload` of `_register` below, which emits the LLVM intrinsic."""


@on_numba
def _register() -> None:
    """The compiled `prefetch`: an `overload` emitting `llvm.prefetch` (registered when Numba
    is imported, before any kernel compiles: a fully cached run imports no Numba)."""
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic, overload

    @intrinsic
    def _llvm_prefetch(typingctx, arr, idx):
        """`llvm.prefetch` of `arr.flat[idx]` (read, high locality, data cache)."""
        if not (isinstance(arr, types.Array) and arr.layout == "C"
                and isinstance(idx, types.Integer)):
            return None
        sig = types.void(arr, idx)

        def codegen(context, builder, signature, args):
            aryty, idxty = signature.args
            ary = context.make_array(aryty)(context, builder, args[0])
            i = context.cast(builder, args[1], idxty, types.intp)
            ptr = builder.gep(ary.data, [i])
            i8p = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
            builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0),
                              ir.Constant(i32, 3), ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return sig, codegen

    @overload(prefetch, inline="always")
    def _prefetch_compiled(arr, idx):
        if (isinstance(arr, types.Array) and arr.layout == "C"
                and isinstance(idx, types.Integer)):
            def impl(arr, idx):
                _llvm_prefetch(arr, idx)
            return impl
        return None
