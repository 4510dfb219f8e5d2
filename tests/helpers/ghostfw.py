"""A framework plugin whose framework is not installed."""

from amp_suite import hookimpl
from amp_suite.records import FrameworkInfo


@hookimpl
def framework_info() -> FrameworkInfo:
    return FrameworkInfo(name="ghost", display_name="Ghost", modules=("amp_suite_no_such_module",),
                         extra="ghost", precisions={"cpu": ("fp32",)})
