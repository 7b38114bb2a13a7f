"""The AWS SDK's own conformance handlers, found, mapped and loaded as they are.

They live outside the repository, in a folder `shared/aws-sdk-conformance` (the
`packages/aws-durable-execution-sdk-python-conformance-tests` folder of AWS's SDK
repository, unmodified; its SOURCE.md says where from): found through
`ALARMTOP_AWS_SDK_CONFORMANCE`, or in a `shared/aws-sdk-conformance` folder beside
the repository or above it. Missing, the tests skip saying so (and fail under
`ALARMTOP_REQUIRE_ALL`).

`template_<suite>.yaml` maps requirement ids to functions (`TestingMetadata.
TestDescription`, `Properties.Handler`, `DurableConfig.ExecutionTimeout`,
`Environment.Variables`); every function of a suite's template is registered with
`rt.register_lambda` under its resource name, so a chained invoke's target (given
as `${TargetEcho.Arn}:$LATEST`) is one of them. The handler modules are imported
under a package name of their own (`aws_sdk_conformance.<suite>.<module>`), never
from `sys.path`, so their generic names (`step`, `map`, `wait`) shadow nothing.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ENV = "ALARMTOP_AWS_SDK_CONFORMANCE"
FOLDER = Path("shared") / "aws-sdk-conformance"
PACKAGE = "aws_sdk_conformance"
ROOT = Path(__file__).resolve().parents[2]
_REF = re.compile(r"\$\{([A-Za-z0-9]+)\.Arn\}")


class HandlersMissing(Exception):
    """The shared handlers folder is not there (skip, or fail under REQUIRE_ALL)."""


def find_folder() -> Path:
    override = os.environ.get(ENV)
    if override:
        path = Path(override)
        if not (path / "handlers").is_dir():
            raise HandlersMissing(f"{ENV}={override} has no handlers/ folder")
        return path
    for base in [ROOT, *ROOT.parents]:
        candidate = base / FOLDER
        if (candidate / "handlers").is_dir():
            return candidate
    raise HandlersMissing(f"no {FOLDER} folder beside or above {ROOT}; set {ENV} to the "
                          "SDK repository's packages/aws-durable-execution-sdk-python-"
                          "conformance-tests folder")


@dataclass(frozen=True)
class Function:
    """One function of a suite's template."""

    resource: str  # its name in the template: the function name it is registered under
    suite: str
    handler: str  # "<suite>.<module>.handler"
    requirements: tuple[str, ...]
    timeout_s: int | None
    env: dict[str, str] = field(default_factory=dict)  # ${X.Arn} left for the runner
    durable: bool = True


class _Loader(yaml.SafeLoader):
    """CloudFormation's tags (!GetAtt, !Ref, ...) read as plain values."""


def _any_tag(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    assert isinstance(node, yaml.MappingNode)
    return loader.construct_mapping(node)


_Loader.add_multi_constructor("!", _any_tag)


def read_templates(folder: Path) -> dict[str, list[Function]]:
    """Every function of every `template_<suite>.yaml`, by suite."""
    out: dict[str, list[Function]] = {}
    for path in sorted(folder.glob("template_*.yaml")):
        suite = path.stem[len("template_"):]
        data = yaml.load(path.read_text(), Loader=_Loader)
        for name, res in (data.get("Resources") or {}).items():
            if res.get("Type") != "AWS::Serverless::Function":
                continue
            props = res.get("Properties") or {}
            meta = res.get("TestingMetadata") or {}
            config = props.get("DurableConfig")
            variables = ((props.get("Environment") or {}).get("Variables") or {})
            out.setdefault(suite, []).append(Function(
                name, suite, str(props["Handler"]), tuple(meta.get("TestDescription") or ()),
                int(config["ExecutionTimeout"]) if config else None,
                {k: str(v) for k, v in variables.items() if isinstance(v, str)},
                durable=config is not None))
    return out


def by_requirement(templates: dict[str, list[Function]]) -> dict[str, Function]:
    return {rid: fn for fns in templates.values() for fn in fns for rid in fn.requirements}


class _InstanceFactory:
    """A plugin instance as the plugin factory SDK 3.0.0 registers (see below)."""

    def __init__(self, plugin: Any) -> None:
        self.plugin = plugin

    def create_plugin(self, info: Any) -> Any:
        return self.plugin


@contextlib.contextmanager
def plugin_instances_as_factories() -> Iterator[None]:
    """While the plugin suite's handlers are imported: the handlers (written for the
    SDK of their repository, 1.7.0) pass plugin instances, `plugins=[MyPlugin()]`;
    SDK 3.0.0 registers factories (`create_plugin(info)` each invocation) and refuses
    instances. Each instance is handed to the SDK as a factory that returns it: the
    handler files stay as they are, and the SDK's own plugin executor runs the hooks.
    """
    from aws_durable_execution_sdk_python import execution
    original = execution.load_configured_plugins

    def adapted(explicit: Any, **options: Any) -> Any:
        wrapped = [p if hasattr(p, "create_plugin") else _InstanceFactory(p)
                   for p in explicit or []]
        return original(wrapped, **options)

    execution.load_configured_plugins = adapted  # type: ignore[assignment]
    try:
        yield
    finally:
        execution.load_configured_plugins = original


def load_handler(folder: Path, dotted: str) -> Any:
    """`handler` of `<suite>.<module>`, imported as `aws_sdk_conformance.<suite>.<module>`."""
    if PACKAGE not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            PACKAGE, folder / "handlers" / "__init__.py",
            submodule_search_locations=[str(folder / "handlers")])
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[PACKAGE] = module
        spec.loader.exec_module(module)
    path, _, attr = dotted.rpartition(".")
    with plugin_instances_as_factories():
        return getattr(importlib.import_module(f"{PACKAGE}.{path}"), attr)


def targets(fn: Function) -> set[str]:
    """The functions `fn` invokes (named in its environment as `${X.Arn}`)."""
    return {m.group(1) for v in fn.env.values() for m in _REF.finditer(v)}


def environment(fn: Function, function_arn: Any) -> dict[str, str]:
    """The function's environment, `${X.Arn}` replaced by the registered function's ARN."""
    return {k: _REF.sub(lambda m: function_arn(m.group(1)), v) for k, v in fn.env.items()}
