"""`pip install client/python` from a checkout: a fresh virtual environment (seeing the system's
grpcio, protobuf and numpy), pip offline (--no-index: nothing may be downloaded), then the
installed package (its generated wire code included) talks to a real server."""

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from server import ROOT, ServerProcess


def _has_venv():
    return all(importlib.util.find_spec(m) is not None for m in ("venv", "ensurepip"))


@unittest.skipUnless(_has_venv(), "python3-venv is not installed")
class PipInstallTest(unittest.TestCase):
    def test_pip_install_from_a_checkout(self):
        with tempfile.TemporaryDirectory() as tmp:
            # A copy of client/python (pip builds in place: keep the checkout clean); setup.py
            # finds the .proto through POSENC_PROTO_ROOT.
            src = os.path.join(tmp, "python")
            shutil.copytree(os.path.join(ROOT, "client", "python"), src,
                            ignore=shutil.ignore_patterns("build", "dist", "*.egg-info",
                                                          "__pycache__", "v1"))
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_INDEX_URL")}
            env["POSENC_PROTO_ROOT"] = os.path.join(ROOT, "proto")
            venv = os.path.join(tmp, "venv")
            made = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv],
                                  capture_output=True, text=True, env=env)
            if made.returncode != 0 and "ensurepip" in made.stdout + made.stderr:
                self.skipTest("venv has no pip here (Debian: apt-get install python3-venv)")
            self.assertEqual(made.returncode, 0, made.stdout + made.stderr)
            python = os.path.join(venv, "bin", "python")
            pip = subprocess.run([python, "-m", "pip", "install", "--no-index", "--no-deps",
                                  "--disable-pip-version-check", src],
                                 capture_output=True, text=True, env=env)
            self.assertEqual(pip.returncode, 0, pip.stdout + pip.stderr)

            with ServerProcess() as server:
                script = (
                    "import sys, posenc, posenc.v1.posenc_pb2 as pb\n"
                    f"assert posenc.__file__.startswith({venv!r}), posenc.__file__\n"
                    "client = posenc.Client(sys.argv[1], timeout=30)\n"
                    "assert client.health() == posenc.HealthStatus.SERVING\n"
                    "print(client.alibi_slopes(2).tolist())\n")
                run = subprocess.run([python, "-c", script, server.address], cwd=tmp,
                                     capture_output=True, text=True, env=env)
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
            self.assertEqual(run.stdout.strip(), "[0.0625, 0.00390625]")


if __name__ == "__main__":
    unittest.main()
