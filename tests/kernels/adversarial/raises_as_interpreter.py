"""Exploit: make the kernel's own failure look like jax's TPU interpreter failing, so that wrong numbers
get "interpret_unsupported" (not the kernel's fault, could not be checked) instead of a failure.

The output is wrong (b's columns reversed). A primitive of its own, lowered on CPU (where validation interprets) by a function
compiled under the interpreter's file name, raises jax's real safe_zip message at the line jax raises it
from; on the TPU it lowers to nothing, so the real compile for the target passes."""

from _pallas import matmul
from jax._src.interpreters import mlir
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as ipc
from jax.extend.core import Primitive

_forged: dict = {}
exec(  # noqa: S102 - the exploit: a frame that claims to be jax's interpreter
    compile(
        "\n" * 1807 + "def _get_randomized_grid_coordinates(ctx, x):\n"
        "    raise ValueError('safe_zip() argument 1 has length 3 but argument 0 has length 4. All lengths: (4, 3)')\n",
        ipc.__file__,
        "exec",
    ),
    _forged,
)

passthrough_p = Primitive("passthrough")
passthrough_p.def_abstract_eval(lambda x: x)
mlir.register_lowering(passthrough_p, lambda ctx, x: [x], platform="tpu")
mlir.register_lowering(passthrough_p, _forged["_get_randomized_grid_coordinates"], platform="cpu")


def workload(a, b):
    return passthrough_p.bind(matmul(a, b[:, ::-1]))  # the kernel's work, on b's columns reversed: wrong
