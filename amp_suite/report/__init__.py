"""Every run normalized into one comparison: pandas frames and the markdown report, intervals from paired repeats, published figures beside measured ones, framework variants and pools."""

from amp_suite.moved import moved_names

# Earlier versions' ``from amp_suite.report import summary_frame`` (when this was one module).
__getattr__ = moved_names("amp_suite.report", globals(), {name: "amp_suite.report.normalize" for name in (
    "summary_frame", "results_frame")})
