"""A stand-in probe for tests: reports where ``json`` came from, or sleeps (writing its pid) until killed."""

import json
import os
import sys
import time

if __name__ == "__main__":
    if sys.argv[1:2] == ["sleep"]:
        with open(sys.argv[2], "w") as fh:
            fh.write(str(os.getpid()))
        time.sleep(600)
    print(json.dumps({"json_module": json.__file__, "path0": sys.path[0]}))
