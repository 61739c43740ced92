"""CUDA shared memory from Python (``Client.register_cuda_shared_memory``): torch tensors on the
GPU, exported with a CUDA IPC handle (``posenc.cuda_ipc_handle``, the driver through ctypes),
registered with a posenc-server --backend=cuda (a second process) and computed on where they
are: q and k rotated in place, a RopeCache table written into device memory. Results equal the
inline calls' byte for byte (the server runs with --cuda_small_call_bytes=0, so those run on the
device too). Skips without torch with a CUDA device (CI: Debian's python3-torch has no CUDA);
tests/bench/run_cuda.sh runs it on a GPU machine."""

import dataclasses
import unittest

import numpy as np

import posenc
from server import ServerProcess

try:
    import torch
    HAVE_CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover - deploy/install-deps.sh installs python3-torch
    torch = None
    HAVE_CUDA = False


@unittest.skipUnless(HAVE_CUDA, "needs torch with a CUDA device")
class CudaSharedMemoryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess("--backend=cuda", "--cuda_small_call_bytes=0",
                                   "--allow_shared_memory", "--threads=2")
        cls.client = posenc.Client(cls.server.address)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.stop()

    def register(self, name, tensor):
        handle = posenc.cuda_ipc_handle(tensor)
        self.assertEqual(handle.device_id, tensor.device.index)
        self.assertGreaterEqual(handle.allocation_bytes, handle.offset + tensor.nbytes)
        self.client.register_cuda_shared_memory(name, handle.raw_handle,
                                                handle.offset + tensor.nbytes,
                                                device_id=handle.device_id)
        self.addCleanup(self.client.unregister_shared_memory, name)
        return posenc.SharedMemoryRef(name, handle.offset, tensor.nbytes,
                                      dtype=posenc.DType.FLOAT32, shape=tuple(tensor.shape))

    def test_apply_rope_rotates_torch_tensors_in_place(self):
        generator = torch.Generator().manual_seed(7)
        q_host = torch.randn(2, 64, 8, 128, generator=generator)
        k_host = torch.randn(2, 64, 2, 128, generator=generator)
        config = posenc.RopeConfig(base=10000.0)
        expected = self.client.apply_rope(q_host.numpy(), k_host.numpy(), config=config)
        q, k = q_host.cuda(), k_host.cuda()
        torch.cuda.synchronize()
        self.client.apply_rope(self.register("q", q), self.register("k", k), config=config)
        np.testing.assert_array_equal(q.cpu().numpy(), expected.q)
        np.testing.assert_array_equal(k.cpu().numpy(), expected.k)
        [status] = self.client.shared_memory_status("q")
        self.assertEqual((status.kind, status.device_id),
                         (posenc.SharedMemoryKind.CUDA, q.device.index))

    def test_rope_cache_writes_into_device_memory(self):
        config = posenc.RopeConfig(head_dim=64)
        expected = self.client.rope_cache(range(256), config)
        cos = torch.zeros(256, 32, device="cuda")
        sin = torch.zeros(256, 32, device="cuda")
        torch.cuda.synchronize()
        self.client.rope_cache(range(256), config, output_shared_memory={
            "cos": self.register("cos", cos), "sin": self.register("sin", sin)})
        np.testing.assert_array_equal(cos.cpu().numpy(), expected.cos)
        np.testing.assert_array_equal(sin.cpu().numpy(), expected.sin)

    def test_cuda_ipc_handle_refuses_host_tensors(self):
        with self.assertRaises(TypeError):
            posenc.cuda_ipc_handle(torch.zeros(4))
        with self.assertRaises(TypeError):
            posenc.cuda_ipc_handle(np.zeros(4))

    def test_host_side_tensors_are_refused(self):
        ids = torch.arange(4, device="cuda")  # int64: position ids are read on the host
        torch.cuda.synchronize()
        ref = dataclasses.replace(self.register("ids", ids), dtype=posenc.DType.INT64)
        with self.assertRaises(posenc.FailedPreconditionError) as cm:
            self.client.apply_rope(np.zeros((1, 4, 2, 16), np.float32),
                                   positions=posenc.Positions.ids(ref))
        self.assertIn("CUDA region", str(cm.exception))
        self.assertEqual(cm.exception.field, "positions.ids.shared_memory.region")


if __name__ == "__main__":
    unittest.main()
