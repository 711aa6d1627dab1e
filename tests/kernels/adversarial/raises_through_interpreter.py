"""Exploit: fail inside jax's real interpreter code, not a forged copy of it, so that every frame from
the interpreter down is genuinely jax's. The output is wrong (b's columns reversed); a primitive of its own is lowered on CPU
by jax's own `_get_parallel_dim_semantics`, which raises (AttributeError) when handed the lowering
context. On the TPU it lowers to nothing, so the real compile for the target passes."""

import functools

from _pallas import matmul
from jax._src.interpreters import mlir
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
from jax.extend.core import Primitive

passthrough_p = Primitive("passthrough_real")
passthrough_p.def_abstract_eval(lambda x: x)
mlir.register_lowering(passthrough_p, lambda ctx, x: [x], platform="tpu")
# called as rule(ctx, x): ctx has no dimension_semantics, so jax's own frame raises
mlir.register_lowering(passthrough_p, functools.partial(ipc._get_parallel_dim_semantics), platform="cpu")


def workload(a, b):
    return passthrough_p.bind(matmul(a, b[:, ::-1]))  # the kernel's work, on b's columns reversed: wrong
