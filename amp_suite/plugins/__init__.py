"""The plugin boundary: hook specifications, the checks of what hooks return, the pluggy host that loads backends and reporters, the helpers backends share, and the host's own memory plugin."""
