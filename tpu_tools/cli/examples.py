"""`maxkernel examples` (registered by cli.py): search the example index from the shell.

The same search as the MCP tool `find_examples`: jax's installed Pallas TPU ops, our JaxBench
references, the guide's sections and any `--examples DIR` folders.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from maxkernel.tpu_tools.errors import UsageError


def _reference(ref: str) -> tuple[str, tuple[str, ...]]:
    path = Path(ref)
    if path.exists():
        path = path / "reference.py" if path.is_dir() else path
        try:
            return path.read_text(encoding="utf-8"), ()
        except OSError as e:
            raise UsageError(f"cannot read reference {ref}: {e.strerror}") from None
    from maxkernel.jaxbench import registry

    try:
        task = registry.resolve_id(ref)
    except registry.UnknownTaskError as e:
        raise UsageError(str(e)) from None
    return registry.task_path(task).read_text(encoding="utf-8"), (task,)


def cmd_examples(args) -> int:
    from maxkernel.tpu_tools.cli.main import _print_json
    from maxkernel.tpu_tools.examples.index import ExampleError, ExampleIndex

    error = args.error or ""
    if args.error_file:
        try:
            error = Path(args.error_file).read_text(encoding="utf-8")
        except OSError as e:
            raise UsageError(f"cannot read --error-file {args.error_file}: {e.strerror}") from None
    if args.k < 1 or args.budget_tokens < 100:
        raise UsageError("-k must be >= 1 and --budget-tokens >= 100")
    try:
        ix = ExampleIndex.open(args.examples)
        if args.show:
            print(ix.get(args.show).full_text(), end="")
            return 0
    except ExampleError as e:
        raise UsageError(str(e)) from None
    query = " ".join(args.query)
    if not any((query.strip(), args.operator, args.primitive, error.strip(), args.reference)):
        raise UsageError("give a QUERY, --operator, --primitive, --error/--error-file, --reference or --show")
    ref_src, exclude = _reference(args.reference) if args.reference else ("", ())
    result = ix.search(
        query,
        operator=args.operator or "",
        primitives=args.primitive,
        error=error,
        reference_source=ref_src,
        k=args.k,
        budget_tokens=args.budget_tokens,
        kinds=args.kind or ("kernel", "guide"),
        exclude_tasks=exclude,
    )
    if args.json:
        _print_json(result)
    else:
        print(
            f"{len(result.hits)} example(s) for {result.mode} search [{' '.join(result.words[:12])}]; "
            f"{result.used_tokens}/{result.budget_tokens} tokens (chars/4); index: {result.index.entries} "
            f"entries, jax {result.index.jax_version}"
        )
        for i, h in enumerate(result.hits, 1):
            print(f"\n{i}. {h.id}  score {h.score:.2f}  [{', '.join(h.what)}]\n   {h.uri}")
            if not args.ids_only:
                print(h.excerpt)
    return 0 if result.hits else 1


def register(sub) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "examples", help="find working Pallas TPU kernels: by text, operator, primitives, reference or error"
    )
    p.add_argument("query", nargs="*", help="free text, e.g. ragged paged attention")
    p.add_argument("--operator", help="operator name, e.g. gqa_attention")
    p.add_argument(
        "--primitive", action="append", default=[], help="a primitive, e.g. jnp.einsum (repeatable)"
    )
    p.add_argument("--error", help="compiler error / verdict text")
    p.add_argument("--error-file", help="file holding the error text")
    p.add_argument(
        "--reference", "-r", help="JaxBench task id or reference file: its operator and primitives"
    )
    p.add_argument("--kind", action="append", choices=["kernel", "guide"], help="restrict kinds (repeatable)")
    p.add_argument("-k", type=int, default=3, help="how many examples (default 3)")
    p.add_argument(
        "--budget-tokens", type=int, default=2000, help="all excerpts together (chars/4; default 2000)"
    )
    p.add_argument(
        "--examples", action="append", default=[], metavar="DIR", help="also index DIR (repeatable)"
    )
    p.add_argument("--show", metavar="ID", help="print one example's full text")
    p.add_argument("--ids-only", action="store_true", help="list ids without excerpts")
    p.add_argument("--json", action="store_true", help="print the search result as JSON")
    p.set_defaults(func=cmd_examples)


if __name__ == "__main__":
    sys.exit("run as: maxkernel examples ...")
