"""Documentation that cannot rot: every hook has a section headed by its exact signature."""

import inspect
import re

from amp_suite import hookspecs
from conftest import REPO


def hook_signatures() -> dict[str, str]:
    out = {}
    for name, func in inspect.getmembers(hookspecs, inspect.isfunction):
        if not hasattr(func, "amp_suite_spec"):
            continue
        sig = inspect.signature(func)
        params = ", ".join(f"{p.name}: {p.annotation}" for p in sig.parameters.values())
        out[name] = f"{name}({params}) -> {sig.return_annotation}"
    return out


def test_there_are_hooks_to_document():
    assert {"framework_info", "build_model", "set_precision", "train_epoch", "measure"} <= set(hook_signatures())


def test_every_hook_has_a_section_headed_by_its_signature():
    headings = set(re.findall(r"^#+ `(.+)`$", (REPO / "docs" / "hooks.md").read_text(), flags=re.M))
    missing = [sig for sig in hook_signatures().values() if sig not in headings]
    assert not missing, f"undocumented or out-of-date hooks in docs/hooks.md: {missing}"


def test_firstresult_hooks_are_marked_in_the_docs():
    text = (REPO / "docs" / "hooks.md").read_text()
    for name, sig in hook_signatures().items():
        spec = getattr(hookspecs, name).amp_suite_spec
        section = text.split(f"`{sig}`", 1)[1].split("\n#", 1)[0]
        assert ("**firstresult.**" in section) == bool(spec.get("firstresult")), name
