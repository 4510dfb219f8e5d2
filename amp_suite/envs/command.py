"""``amp-suite env create | list | remove``: the command line of environments."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from amp_suite.config.catalog import find_config, load_config
from amp_suite.config.environments import ENVS_DIR_ENV, EnvironmentSpec, environments_dir
from amp_suite.envs.build import create, remove, state_of
from amp_suite.errors import EXIT_FAILED, EXIT_OK, UsageError
from amp_suite.owned_paths import NotOursError
from amp_suite.schema import closest


def add_env_parser(sub: argparse._SubParsersAction) -> None:
    """The ``env`` command and its three actions."""
    env = sub.add_parser("env", help="build, list and remove the Python environments frameworks run in "
                                     "([environments.\"NAME\"]; docs/environments.md)")
    actions = env.add_subparsers(dest="env_action", metavar="ACTION", parser_class=type(env))
    create_parser = actions.add_parser("create", help="build environments with uv (kept when unchanged)")
    create_parser.add_argument("names", nargs="*", metavar="NAME",
                               help="environments to build (default: every declared one but the GPU set)")
    create_parser.add_argument("-p", "--plugin", action="append", default=[], metavar="MODULE",
                               help="load an extra plugin module (repeatable): the one that provides an "
                                    "environment's framework, when no installed plugin does")
    create_parser.add_argument("--gpu", action="store_true",
                               help="also build the GPU set: one environment per framework, each with only its "
                                    "own CUDA and cuDNN")
    list_parser = actions.add_parser("list", help="each environment: built or not, its interpreter and versions")
    remove_parser = actions.add_parser("remove", help="delete built environments")
    remove_parser.add_argument("names", nargs="+", metavar="NAME")
    for parser in (create_parser, list_parser, remove_parser):
        parser.add_argument("--config", help="configuration declaring [environments] (default: ./benchmarks.toml "
                                             "when there is one)")


def _chosen(environments: dict[str, EnvironmentSpec], names: list[str]) -> list[EnvironmentSpec]:
    for name in names:
        if name not in environments:
            raise UsageError(f"unknown environment {name!r}; declared: {', '.join(environments) or 'none'}"
                             f"{closest(name, list(environments))}")
    return [environments[name] for name in dict.fromkeys(names)]


def cmd_env(args: argparse.Namespace, emit: Callable[[str], None] | None = None,
            frameworks: Callable[[], Iterable[str]] | None = None) -> int:
    """Run ``amp-suite env ACTION``; the exit code.

    ``frameworks`` gives the frameworks the loaded plugins provide (the host is
    the caller's: this layer loads no plugin); ``create`` builds no
    environment for another framework.  None checks nothing.
    """
    say = emit or (lambda line: print(line, flush=True))
    config_path = find_config(args.config)
    config = load_config(config_path)
    envs_dir = environments_dir(config_path)
    environments = config.environments
    if args.env_action == "list":
        return _list(environments, envs_dir, say)
    if args.env_action == "remove":
        orphans = orphaned(environments, envs_dir)
        chosen = [EnvironmentSpec(name, "", ("orphaned",)) for name in args.names if name in orphans]  # table gone
        chosen += _chosen(environments, [n for n in args.names if n not in orphans])
        refused = 0
        for spec in chosen:
            try:
                say(remove(spec, envs_dir))
            except NotOursError as exc:  # not amp-suite's: left alone, the others still removed
                refused += 1
                print(f"amp-suite env: error: {exc}", file=sys.stderr, flush=True)
        return EXIT_FAILED if refused else EXIT_OK
    if args.env_action != "create":
        raise UsageError("amp-suite env needs an action: create, list or remove")
    if args.names:
        chosen = _chosen(environments, args.names)
        chosen += [s for s in environments.values() if args.gpu and s.gpu and s not in chosen]
    else:
        chosen = [s for s in environments.values() if args.gpu or not s.gpu]
    if not chosen:
        raise UsageError("no environment to build: declare [environments.\"NAME\"] in benchmarks.toml "
                         "(docs/environments.md), or build the GPU set with --gpu")
    provided = list(frameworks()) if frameworks is not None else [s.framework for s in chosen]
    failed = 0
    for spec in chosen:
        if spec.framework not in provided:  # no worker could run in it: a build would be minutes for nothing
            failed += 1
            print(f"amp-suite env: error: environment {spec.name!r} runs framework {spec.framework!r}, which no "
                  f"loaded plugin provides (known: {', '.join(provided)}; -p MODULE loads another); not built",
                  file=sys.stderr, flush=True)
            continue
        say(f"amp-suite env: {spec.name} ({spec.framework}) -> {envs_dir / spec.name if spec.managed else spec.python}")
        try:
            state, done = create(spec, envs_dir, emit=_progress_printer(spec.name))
        except UsageError as exc:
            failed += 1
            print(f"amp-suite env: error: {exc}", file=sys.stderr, flush=True)
            continue
        say(f"amp-suite env: {spec.name}: {done}; {_versions_text(state.versions)}")
    return EXIT_FAILED if failed else EXIT_OK


def _progress_printer(name: str) -> Callable[[str], None]:
    """Prints each line of a build's output to stderr, after the environment's name."""
    def emit(line: str) -> None:
        print(f"  {name}: {line}", file=sys.stderr, flush=True)

    return emit


def _versions_text(versions: dict[str, str | None]) -> str:
    return ", ".join(f"{name} {version or 'missing'}" for name, version in versions.items()) or "no versions read"


def _list(environments: dict[str, EnvironmentSpec], envs_dir: Path, say: Callable[[str], None]) -> int:
    orphans = orphaned(environments, envs_dir)
    if not environments and not orphans:
        say("no environments declared ([environments.\"NAME\"] in benchmarks.toml; docs/environments.md)")
        return EXIT_OK
    if os.path.lexists(envs_dir) and not envs_dir.is_dir():  # a file, or a link that leads nowhere
        from amp_suite.safe_files import describe_mode

        what = ("a link that leads nowhere" if not envs_dir.exists() else
                f"a link to {describe_mode(os.stat(envs_dir).st_mode)}" if envs_dir.is_symlink()
                else describe_mode(os.lstat(envs_dir).st_mode))
        say(f"environments (managed ones would be in {envs_dir}, but it is {what}, not a folder: none can be built "
            f"there; set {ENVS_DIR_ENV} to a folder):")
    else:
        say(f"environments (managed ones in {envs_dir}):")
    width = max(map(len, [*environments, *orphans]))
    for spec in environments.values():
        state = state_of(spec, envs_dir)
        if state.built:
            status = "built (stale: its requirements changed; env create rebuilds it)" if state.stale else "built"
        elif not spec.managed:
            status = "missing"
        else:
            status = "not built"
        origin = "your interpreter" if not spec.managed else ("GPU set" if spec.gpu else "managed")
        say(f"  {spec.name:<{width}}  {spec.framework:<6} {status:<9} {state.python}  [{origin}]")
        if spec.description:
            say(f"  {'':<{width}}  {spec.description}")
        if state.built and state.versions:
            say(f"  {'':<{width}}  {_versions_text(state.versions)}")
        elif state.problem and not state.built and (not spec.managed or (state.folder is not None
                                                                         and os.path.lexists(state.folder))):
            say(f"  {'':<{width}}  {state.problem}")
    for name in orphans:
        say(f"  {name:<{width}}  built by amp-suite, but no [environments.\"{name}\"] declares it any more: "
            f"`amp-suite env remove {name}` deletes {envs_dir / name}")
    return EXIT_OK


def orphaned(environments: dict[str, EnvironmentSpec], envs_dir: Path) -> list[str]:
    """Folders of the environments folder that amp-suite built (marker or stamp, no link followed) and no table
    declares."""
    from amp_suite.envs.build import made_by_amp_suite

    if not envs_dir.is_dir():
        return []
    return sorted(folder.name for folder in envs_dir.iterdir()
                  if folder.name not in environments and made_by_amp_suite(folder))
