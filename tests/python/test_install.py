"""The package as users get it: a wheel built from a checkout (the CI command, `python3 -m pip
wheel --no-deps --no-build-isolation client/python`), installed offline (--no-index) into a fresh
virtual environment that sees the system's grpcio, protobuf and numpy, imported and used against
a real server there, and its types checked with mypy (Debian's) through the installed py.typed
package."""

import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

from server import ROOT, ServerProcess

# What a typed user of the package writes; mypy must accept it (and reject the last line).
TYPED_USER = textwrap.dedent("""\
    from typing import Any

    import numpy as np
    import posenc

    def rotate(client: posenc.Client, q: "np.ndarray[Any, Any]") -> "np.ndarray[Any, Any]":
        config = posenc.RopeConfig(head_dim=64, style=posenc.RopeStyle.GPTJ,
                                   scaling=posenc.RopeScaling(type=posenc.RopeScalingType.YARN,
                                                              factor=4.0))
        result: posenc.ApplyRopeResult = client.apply_rope(q, config=config, layout="bshd")
        derived: posenc.RopeDerived = result.derived
        print(derived.effective_base, posenc.DType.BFLOAT16.value)
        return result.q

    def describe(client: posenc.Client) -> int:
        groups = client.describe_rope({"head_dim": 64}).groups
        return len(groups) + client.get_server_info().max_message_bytes

    def field_of(error: posenc.PosencError) -> str:
        return (error.field or "") + (error.reason or "") + str(error.retry_delay or 0.0)

    status: posenc.HealthStatus = posenc.HealthStatus.SERVING
    wrong: int = posenc.RopeStyle.SIDEWAYS
    """)


# CI (tests/run_all.sh) sets it: a missing tool is then a failure, not a skip.
REQUIRED = os.environ.get("POSENC_REQUIRE_PYTHON_TOOLS") == "1"
PACKAGING = all(importlib.util.find_spec(m) is not None
                for m in ("venv", "ensurepip", "pip", "setuptools", "wheel"))


def missing(what):
    """Skips the test (or class) without `what`; fails it when the tools are required."""
    if REQUIRED:
        raise AssertionError(f"{what} is not installed (POSENC_REQUIRE_PYTHON_TOOLS=1)")
    raise unittest.SkipTest(f"{what} is not installed")


class WheelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not PACKAGING:
            missing("python3-venv, python3-pip, python3-setuptools or python3-wheel")
        cls.tmp = tempfile.TemporaryDirectory()
        tmp = cls.tmp.name
        cls.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_INDEX_URL")}
        cls.env["POSENC_SOURCE_ROOT"] = ROOT
        # A copy of client/python: pip builds in place (build/, *.egg-info) and the checkout
        # stays clean; generate.py finds proto/ through POSENC_SOURCE_ROOT.
        src = os.path.join(tmp, "python")
        shutil.copytree(os.path.join(ROOT, "client", "python"), src,
                        ignore=shutil.ignore_patterns("build", "dist", "*.egg-info",
                                                      "__pycache__"))
        wheels = os.path.join(tmp, "wheels")
        cls.run_ok([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", src, "-w", wheels])
        found = glob.glob(os.path.join(wheels, "posenc-*.whl"))
        assert len(found) == 1, found
        cls.wheel = found[0]
        cls.venv = os.path.join(tmp, "venv")
        cls.run_ok([sys.executable, "-m", "venv", "--system-site-packages", cls.venv])
        cls.python = os.path.join(cls.venv, "bin", "python")
        cls.run_ok([cls.python, "-m", "pip", "install", "--no-index", "--no-deps",
                    "--disable-pip-version-check", cls.wheel])

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @classmethod
    def run_ok(cls, argv, **kwargs):
        run = subprocess.run(argv, capture_output=True, text=True, env=cls.env,
                             cwd=cls.tmp.name, **kwargs)
        if run.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} failed:\n{run.stdout}{run.stderr}")
        return run

    def test_the_wheel_holds_the_generated_code_and_the_types(self):
        names = set(subprocess.run([sys.executable, "-c", (
            "import sys, zipfile; print('\\n'.join(zipfile.ZipFile(sys.argv[1]).namelist()))"),
            self.wheel], capture_output=True, text=True, check=True).stdout.split())
        for name in ("posenc/py.typed", "posenc/_enums.pyi", "posenc/service_config.json",
                     "posenc/v1/posenc_pb2.py", "posenc/v1/posenc_pb2.pyi",
                     "posenc/v1/posenc_pb2_grpc.py", "posenc/_vendored/health_pb2_grpc.py",
                     "posenc/_vendored/status_pb2.py", "posenc/_vendored/error_details_pb2.py"):
            self.assertIn(name, names)

    def test_the_installed_package_talks_to_a_server(self):
        script = textwrap.dedent(f"""\
            import sys, numpy as np, posenc
            assert posenc.__file__.startswith({self.venv!r}), posenc.__file__
            client = posenc.Client(sys.argv[1], timeout=30)
            assert client.health() == posenc.HealthStatus.SERVING
            assert client.describe_rope(posenc.RopeConfig(head_dim=8)).groups
            try:
                client.alibi_slopes(0)
            except posenc.InvalidArgumentError as e:
                assert e.field == "num_heads", e.field
            print(client.alibi_slopes(2).tolist())
            q = np.ones((1, 64, 8, 64), np.float32)
            assert np.array_equal(client.apply_rope(q).q, client.apply_rope(q, k=q).k)
            if sys.argv[2] == "1":  # the build made posenc._wirecall: so must the wheel
                assert posenc.NATIVE_TRANSPORT and client._transport.native
            """)
        with ServerProcess() as server:
            run = self.run_ok([self.python, "-c", script, server.address,
                               os.environ.get("POSENC_EXPECT_NATIVE", "0")])
        self.assertEqual(run.stdout.strip(), "[0.0625, 0.00390625]")

    def test_mypy_checks_a_user_of_the_installed_package(self):
        if not shutil.which("mypy"):
            missing("mypy (Debian: mypy)")
        user = os.path.join(self.tmp.name, "user.py")
        with open(user, "w", encoding="utf-8") as f:
            f.write(TYPED_USER)
        run = subprocess.run(["mypy", "--python-executable", self.python, "--no-incremental",
                              "--cache-dir", os.path.join(self.tmp.name, "mypy"),
                              "--strict", "--ignore-missing-imports", user],
                             capture_output=True, text=True, env=self.env, cwd=self.tmp.name)
        # One error: the last line's member that no enum has, and nothing else.
        errors = [line for line in run.stdout.splitlines() if ": error:" in line]
        self.assertEqual(len(errors), 1, run.stdout + run.stderr)
        self.assertIn('"SIDEWAYS"', errors[0])


if __name__ == "__main__":
    unittest.main()
