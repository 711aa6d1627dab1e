"""dims.py writes a number that follows the size from the input shapes, products of shifted dims too.

A valid 3x3 convolution's mean divides by (H - 2) * (W - 2), a group norm's by C / G * H * W: a kernel
that wrote the traced literal would be right at one size only. The sizes below keep H and W apart, so a
square (H - 2) ** 2 that agrees at every traced size cannot stand in for the product.
"""

from __future__ import annotations

from maxkernel.clients.offline.dims import Symbolic

SIZES = {"small": (8, 16, 20), "full": (128, 128, 96), "derived": (16, 32, 40)}  # (C, H, W) of x [N, C, H, W]


def _program() -> dict:
    def inputs(c: int, h: int, w: int) -> list[dict]:
        return [{"shape": [4, c, h, w], "dtype": "bfloat16"}, {"shape": [64, c, 3, 3], "dtype": "bfloat16"}]

    variants = {
        s: {"inputs": inputs(*d), "out_specs": [], "mismatch": None} for s, d in SIZES.items() if s != "small"
    }
    return {
        "size": "small",
        "inputs": inputs(*SIZES["small"]),
        "input_names": ["x0", "x1"],
        "equations": [],
        "out_specs": [],
        "variants": variants,
    }


def _at(f) -> list[int]:
    return [f(*SIZES[s]) for s in ("small", "full", "derived")]


def _eval(expr: str, size: str) -> int:
    c, h, w = SIZES[size]
    sh = ((4, c, h, w), (64, c, 3, 3))
    return eval(expr, {"sh": sh})  # noqa: S307 - the solver's own expression over shapes


def test_a_valid_convs_output_count_is_a_product_of_dims_less_the_window():
    sym = Symbolic(_program())
    values = _at(lambda c, h, w: (h - 2) * (w - 2))
    expr = sym.expr(values, "mean divisor")
    assert expr == "(sh[0][2] - 2) * (sh[0][3] - 2)" and not sym.unsolved
    assert sym.float_expr([float(v) for v in values], "div literal") == f"float({expr})"


def test_a_group_count_is_a_product_over_a_constant_and_every_form_holds_at_every_size():
    sym = Symbolic(_program())
    cases = {
        "group norm": lambda c, h, w: c // 4 * h * w,  # C / G * H * W, G = 4
        "3 shifted dims": lambda c, h, w: (c - 1) * (h - 1) * (w - 1),
        "padded": lambda c, h, w: 2 * (h + 2) * (w + 2),
    }
    for where, f in cases.items():
        expr = sym.expr(_at(f), where)
        assert all(_eval(expr, s) == f(*SIZES[s]) for s in SIZES), (where, expr)
    assert not sym.unsolved


def test_a_number_no_product_explains_stays_unsolved():
    sym = Symbolic(_program())
    assert sym.expr([7, 11, 13], "primes") == "7"
    assert sym.unsolved and "primes" in sym.unsolved[0]


def test_square_traces_write_h_times_w_not_h_squared():
    """JaxBench's conv tasks trace only square images (H == W at every size): the count of a mean over H and
    W must still be H * W (22k's was written `sh[0][2] * sh[0][2]`, wrong for the first non-square input)."""
    square = {"small": (8, 16, 16), "full": (128, 128, 128), "derived": (16, 32, 32)}
    program = _program()
    program["inputs"] = [{"shape": [4, *square["small"]], "dtype": "bfloat16"}, program["inputs"][1]]
    for s, (c, h, w) in square.items():
        if s != "small":
            program["variants"][s]["inputs"] = [
                {"shape": [4, c, h, w], "dtype": "bfloat16"},
                program["inputs"][1],
            ]
    sym = Symbolic(program)
    values = [(h - 2) * (w - 2) for _, h, w in (square[s] for s in ("small", "full", "derived"))]
    assert sym.expr(values, "valid conv count") == "(sh[0][2] - 2) * (sh[0][3] - 2)"
    assert sym.expr([h * w for _, h, w in (square[s] for s in ("small", "full", "derived"))], "count") == (
        "sh[0][2] * sh[0][3]"
    )
