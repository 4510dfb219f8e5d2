"""amp-suite-json-reporter: the worked example of a third-party reporter plugin."""

__version__ = "0.1.0"
