"""What the machine is: host and device facts recorded beside every number, the numerics libraries loaded, background load and GPU telemetry. No framework is imported here."""
