"""`gpuloan schema`: print the JSON Schema of the stack config (docs/config.schema.json is generated from it)."""

from __future__ import annotations

import json

from gpuloan import exit_codes
from config import config


def register(sub) -> None:
    p = sub.add_parser("schema", help="print the JSON Schema of the gpuloan: config namespace")
    p.add_argument("--markdown", action="store_true", help="print the Markdown config reference instead")
    exit_codes.document(p, {0: "printed"}, ".venv/bin/gpuloan schema --markdown > docs/config.md")
    p.set_defaults(func=run)


def stack_file_schema() -> dict:
    """Schema for a whole Pulumi.<env>.yaml: the gpuloan: keys typed, other namespaces (aws:, pulumi:) free."""
    inner = config.json_schema()
    defs = inner.pop("$defs", {})
    props = {f"gpuloan:{k}": v for k, v in inner["properties"].items()}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "gpuloan stack file (Pulumi.<env>.yaml)",
        "type": "object",
        "properties": {
            "config": {
                "type": "object",
                "properties": props,
                "required": [f"gpuloan:{k}" for k in inner.get("required", [])],
                # Unknown gpuloan: keys are errors (as in `gpuloan validate`); other namespaces are free.
                "propertyNames": {"anyOf": [{"not": {"pattern": "^gpuloan:"}}, {"enum": sorted(props)}]},
                "additionalProperties": True,
            },
            "environment": {},
            "secretsprovider": {"type": "string"},
            "encryptedkey": {"type": "string"},
        },
        "$defs": defs,
    }


def run(args) -> int:
    if args.markdown:
        print(config_markdown(), end="")
    else:
        print(json.dumps(stack_file_schema(), indent=2, sort_keys=True))
    return 0


# --- Markdown reference (docs/config.md is generated from the model, so it cannot drift) ----------------------


def _type_name(annotation) -> str:
    import enum
    import types
    import typing

    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        names = [_type_name(a) for a in args if a is not type(None)]
        optional = type(None) in args
        return " \\| ".join(names) + (" (optional)" if optional else "")
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in args)
    if origin in (list, tuple):
        return f"list of {_type_name(args[0])}" if args else "list"
    if origin is dict:  # the key is a string (YAML); the value is what the map holds
        return f"map of string to {_type_name(args[1])}" if len(args) == 2 else "map"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " \\| ".join(f"`{m.value}`" for m in annotation)
    if isinstance(annotation, type):
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}.get(
            annotation.__name__, annotation.__name__
        )
    return str(annotation)


def _constraints(field) -> str:
    parts = []
    for m in field.metadata:
        for attr, sym in (
            ("ge", ">="),
            ("gt", ">"),
            ("le", "<="),
            ("lt", "<"),
            ("min_length", "min items/len"),
            ("max_length", "max items/len"),
            ("pattern", "pattern"),
        ):
            v = getattr(m, attr, None)
            if v is not None:
                parts.append(f"{sym} `{v}`" if attr == "pattern" else f"{sym} {v}")
    return ", ".join(parts).replace("|", "\\|")


def _default(field) -> str:
    from pydantic_core import PydanticUndefined

    if field.is_required():
        return "**required**"
    value = field.get_default(call_default_factory=True)
    if value is PydanticUndefined:
        return ""
    if hasattr(value, "model_dump"):
        return "(see section)"
    import enum

    if isinstance(value, enum.Enum):
        value = value.value
    return f"`{json.dumps(value)}`"


def config_markdown() -> str:
    import typing

    from pydantic import BaseModel

    sections: list[tuple[str, type[BaseModel]]] = []
    seen: set[type] = set()

    def models_in(annotation):
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield annotation
        for arg in typing.get_args(annotation):
            yield from models_in(arg)

    def walk(prefix: str, model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.add(model)
        sections.append((prefix, model))
        for name, field in model.model_fields.items():
            for sub in models_in(field.annotation):
                is_list = (
                    typing.get_origin(
                        typing.get_args(field.annotation)[0]
                        if typing.get_origin(field.annotation) is typing.Union
                        else field.annotation
                    )
                    is list
                )
                walk(f"{prefix}.{name}" + ("[]" if is_list else ""), sub)

    walk("gpuloan:", config.GpuLoanConfig)
    out = [
        "# Config reference",
        "",
        "<!-- Generated by `make schema` from config/config.py; do not edit by hand. -->",
        "",
        "Every key lives in the `gpuloan:` namespace of `Pulumi.<env>.yaml` (set with `pulumi config set --path`",
        "or by editing the file). Unknown keys are errors. `gpuloan validate <stack>` checks a file and lists every",
        "problem with its path; editors validate with `docs/config.schema.json` (first line of the shipped stacks).",
        "",
    ]
    for prefix, model in sections:
        title = "gpuloan:<key>" if prefix == "gpuloan:" else prefix.replace("gpuloan:.", "gpuloan:")
        out += [f"## `{title}` ({model.__name__})", ""]
        doc = (model.__doc__ or "").strip()
        if doc and not doc.startswith("!!!") and "Usage docs" not in doc:
            out += [doc, ""]
        out += ["| key | type | default | constraints | description |", "|---|---|---|---|---|"]
        for name, field in model.model_fields.items():
            desc = (field.description or "").replace("|", "\\|")
            out.append(
                f"| `{name}` | {_type_name(field.annotation)} | {_default(field)} | {_constraints(field)} | {desc} |"
            )
        out.append("")
    out += [
        "## Rules that span fields",
        "",
        "Reported in the same run as shape errors (a pool or image whose shape is wrong is set aside and the rules",
        "check the rest; a broken section such as `cluster` or `budget` postpones them). See `RULES` in",
        "config/config.py (one tuple, CUDA image compatibility and Kueue scheduling among them) and the money rules",
        "of pricing/checks.py (prices, rates, floors vs budgets), which every command that prices a stack adds:",
        "",
    ]
    out += [f"- {line}" for line in RULES]
    return "\n".join(out) + "\n"


RULES = [
    "instance types must exist in the price data (close matches are suggested) and have NVIDIA GPUs;",
    "every instance type must have a price in the stack's region;",
    "a pool's elastic types may come in several sizes (GPUs per node) of one GPU model, each size with its own spot "
    "and on-demand node group; types of one size may be of different models; the floor's type has one of the "
    "elastic sizes;",
    "`idle_utilization_pct` < `scale_up_utilization_pct`;",
    "`capacity_block` needs a `reservation_id` (gpuloan never buys a Capacity Block); a reservation needs an AZ;",
    "`capacity_block` needs its window, `capacity_block_start` and `capacity_block_end` with a zone, the end after the "
    "start, at most 182 days (+1 for the 11:30 UTC end), and a checkpoint lead that starts the drain after the start;",
    "the guaranteed AZ is in the region and among the cluster AZs; cluster AZs are in the region;",
    "pool names and image names are unique;",
    "the floor's on-demand cost fits the pool budget and the environment budget; pool budgets sum to at most the "
    "environment budget;",
    "at most 10 notifications per budget; `cap_elastic` needs a 100% ACTUAL threshold; the environment budget needs an email;",
    "`0.0.0.0/0` is refused as an API endpoint CIDR;",
    "`gpuloan:region` equals `aws:region` when both are set.",
]
