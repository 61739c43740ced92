"""The Python client's tensor conversions against a real posenc-server: torch tensors in and out
(bfloat16 included), any ``__dlpack__`` array in, and whole-buffer conversions only (an array
whose elements cannot be visited one by one goes through every conversion)."""

import os
import subprocess
import sys
import unittest

import numpy as np

import posenc
from server import rng, serve_module

try:
    import torch
except ImportError:  # pragma: no cover - deploy/install-deps.sh installs python3-torch
    torch = None

SERVER = CLIENT = None  # set by setUpModule
setUpModule, tearDownModule = serve_module(__name__, "--backend=cpu", "--threads=2")


class DLPackOnly:
    """An array known only through the DLPack protocol (as jax, cupy on the host, ...)."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, stream=None):
        return self._array.__dlpack__()

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


class NoElementAccess(np.ndarray):
    """An array that refuses to be iterated or indexed element by element: a conversion that
    loops over elements fails on it."""

    def __iter__(self):
        raise AssertionError("iterated element by element")

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)) or (
                isinstance(index, tuple) and all(isinstance(i, (int, np.integer)) for i in index)):
            raise AssertionError("read element by element")
        return super().__getitem__(index)

    def tolist(self):
        raise AssertionError("converted to a list")


class DLPackTest(unittest.TestCase):
    def test_a_dlpack_array_is_an_input(self):
        q = rng(1).standard_normal((1, 6, 2, 16)).astype(np.float32)
        expected = CLIENT.apply_rope(q)
        result = CLIENT.apply_rope(DLPackOnly(q))
        self.assertIsInstance(result.q, np.ndarray)
        np.testing.assert_array_equal(result.q, expected.q)
        table = rng(2).standard_normal((7, 4))
        np.testing.assert_array_equal(
            CLIENT.relative_embedding(3, 3, 3, DLPackOnly(table)),
            CLIENT.relative_embedding(3, 3, 3, table))

    def test_dlpack_ids_and_masks_are_inputs(self):
        q = rng(7).standard_normal((2, 5, 2, 16)).astype(np.float32)
        ids = np.arange(10, dtype=np.int64).reshape(2, 5) + 3
        mask = np.ones((2, 5), np.int64)
        mask[0, :2] = 0
        for positions, expected in (
                (posenc.Positions.ids(DLPackOnly(ids)), posenc.Positions.ids(ids)),
                (DLPackOnly(ids), ids),
                (posenc.Positions.attention_mask(DLPackOnly(mask)),
                 posenc.Positions.attention_mask(mask))):
            np.testing.assert_array_equal(CLIENT.apply_rope(q, None, positions).q,
                                          CLIENT.apply_rope(q, None, expected).q)
        np.testing.assert_array_equal(CLIENT.rerotate_keys(q, DLPackOnly(np.array([1, 2]))).k,
                                      CLIENT.rerotate_keys(q, [1, 2]).k)

    def test_no_conversion_visits_elements(self):
        q = rng(3).standard_normal((1, 64, 4, 32)).astype(np.float32).view(NoElementAccess)
        k = rng(4).standard_normal((1, 64, 2, 32)).astype(np.float32).view(NoElementAccess)
        ids = np.arange(64, dtype=np.int64).view(NoElementAccess)
        expected = CLIENT.apply_rope(np.asarray(q), np.asarray(k))
        np.testing.assert_array_equal(CLIENT.apply_rope(q, k, posenc.Positions.ids(ids)).q,
                                      expected.q)
        x = rng(5).standard_normal((2, 5, 8)).astype(np.float16).view(NoElementAccess)
        CLIENT.add_position_encoding(x, learned=rng(6).standard_normal((9, 8)).view(
            NoElementAccess))
        # Split requests too (pieces cut by slices, joined into one array).
        with posenc.Client(SERVER.address, max_message_bytes=96 << 10) as small:
            np.testing.assert_array_equal(small.apply_rope(q, k).q, expected.q)


@unittest.skipIf(torch is None, "python3-torch is not installed")
class TorchTest(unittest.TestCase):
    def test_float_tensors_in_and_out(self):
        q = torch.randn(2, 8, 4, 32)
        k = torch.randn(2, 8, 2, 32)
        result = CLIENT.apply_rope(q, k, torch.tensor([3, 9]).reshape(2, 1) + torch.arange(8))
        self.assertIsInstance(result.q, torch.Tensor)
        self.assertEqual((result.q.dtype, tuple(result.q.shape)), (torch.float32, (2, 8, 4, 32)))
        expected = CLIENT.apply_rope(q.numpy(), k.numpy(), posenc.Positions.offsets([3, 9]))
        np.testing.assert_array_equal(result.q.numpy(), expected.q)
        np.testing.assert_array_equal(result.k.numpy(), expected.k)
        # A tensor that needs grad, and a non-contiguous one.
        g = torch.randn(1, 4, 2, 64, requires_grad=True)
        np.testing.assert_array_equal(CLIENT.apply_rope(g).q.numpy(),
                                      CLIENT.apply_rope(g.detach().numpy()).q)
        t = torch.randn(1, 2, 4, 64).transpose(1, 2)
        np.testing.assert_array_equal(CLIENT.apply_rope(t).q.numpy(),
                                      CLIENT.apply_rope(t.contiguous().numpy()).q)

    def test_bfloat16_in_and_out(self):
        q = torch.randn(1, 16, 4, 64).to(torch.bfloat16)
        result = CLIENT.apply_rope(q)
        self.assertEqual(result.q.dtype, torch.bfloat16)
        bits = q.view(torch.int16).numpy().view(np.uint16)
        expected = CLIENT.apply_rope(bits)  # uint16 bit patterns: the same wire tensor
        np.testing.assert_array_equal(result.q.view(torch.int16).numpy().view(np.uint16),
                                      expected.q.view(np.uint16))
        x = torch.randn(2, 3, 8, dtype=torch.bfloat16)
        y = CLIENT.add_position_encoding(x)
        self.assertEqual((y.dtype, tuple(y.shape)), (torch.bfloat16, (2, 3, 8)))

    def test_other_methods_follow_their_tensor_inputs(self):
        table = torch.randn(32, 4)
        bias = CLIENT.relative_bias(5, 7, table)
        self.assertIsInstance(bias, torch.Tensor)
        np.testing.assert_array_equal(bias.numpy(), CLIENT.relative_bias(5, 7, table.numpy()))
        mask = torch.ones(1, 5, dtype=torch.int64)
        alibi = CLIENT.alibi_bias(2, 3, 5, mode="bloom", attention_mask=mask)
        self.assertIsInstance(alibi.bias, np.ndarray)  # no float tensor input: numpy
        self.assertIsInstance(CLIENT.rope_cache(range(4), posenc.RopeConfig(head_dim=8)).cos,
                              np.ndarray)


# In a fresh interpreter that runs SETUP first (argv[1]; it may set `retained`): the free bytes
# glibc keeps after a 64 MiB buffer is freed (mallinfo2's fordblks) and the page faults taken by
# a second 64 MiB buffer (fewer with transparent huge pages, which a gRPC channel's threads get).
FAULTS_OF_A_REUSED_BUFFER = """
import ctypes, resource, sys
import numpy as np
import posenc
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks",
                "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
retained = None
exec(sys.argv[1])
a = np.ones(64 << 20, dtype=np.uint8)
del a
kept = libc.mallinfo2().fordblks
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
b = np.ones(64 << 20, dtype=np.uint8)
print(retained, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before, kept)
posenc.release_freed_memory()
"""
GLIBC = sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")


class RetainFreedMemoryTest(unittest.TestCase):
    """posenc.retain_freed_memory (the C++ client's RetainFreedMemory for Python callers) and
    posenc.Client's retain_freed_memory default."""

    def run_setup(self, setup):
        out = subprocess.run([sys.executable, "-c", FAULTS_OF_A_REUSED_BUFFER, setup],
                             check=True, capture_output=True, text=True, env=dict(os.environ))
        retained, faults, kept = out.stdout.split()
        return retained, int(faults), int(kept)

    def faults(self, setup):
        retained, faults, _ = self.run_setup(setup)
        return retained, faults

    def kept(self, setup):
        return self.run_setup(setup)[2]

    def test_nothing_changes_for_zero_bytes(self):
        self.assertFalse(posenc.retain_freed_memory(0))
        self.assertFalse(posenc.retain_freed_memory(-1))

    def test_a_negative_client_retention_is_invalid(self):
        for bad in (-1, 1.5, True, "1"):
            with self.assertRaises(posenc.InvalidArgumentError) as caught:
                posenc.Client("localhost:1", retain_freed_memory=bad)
            self.assertEqual(caught.exception.field, "retain_freed_memory")

    @unittest.skipUnless(GLIBC, "glibc's allocator only")
    def test_a_freed_buffer_is_reused_without_faulting_its_pages_again(self):
        retained, faults = self.faults("retained = posenc.retain_freed_memory(1 << 30)")
        self.assertEqual(retained, "True")
        default_retained, default_faults = self.faults("retained = posenc.retain_freed_memory(0)")
        self.assertEqual(default_retained, "False")
        # glibc unmapped the first buffer and maps the second afresh (fewer faults with huge
        # pages); kept, the second reuses the first's pages.
        self.assertGreater(default_faults, 0)
        self.assertLess(faults, max(1, default_faults // 4))

    @unittest.skipUnless(GLIBC, "glibc's allocator only")
    def test_a_client_retains_freed_memory_by_default_unless_told_otherwise(self):
        freed = 64 << 20
        self.assertLess(self.kept(""), freed)  # glibc's defaults: the buffer went back
        self.assertGreaterEqual(self.kept("posenc.Client('localhost:1')"), freed)
        for setup in ("posenc.Client('localhost:1', retain_freed_memory=0)",
                      # The caller's own choice, made before the first client, stands.
                      "posenc.retain_freed_memory(0); posenc.Client('localhost:1')",
                      # The first client's choice is the process's: a second one's default
                      # changes nothing.
                      "posenc.Client('localhost:1', retain_freed_memory=0); "
                      "posenc.Client('localhost:1')"):
            self.assertLess(self.kept(setup), freed, setup)
        self.assertGreaterEqual(
            self.kept("posenc.Client('localhost:1', retain_freed_memory=1 << 27)"), freed)


if __name__ == "__main__":
    unittest.main()
