"""posenc.SharedMemory end to end against a posenc-server with --allow_shared_memory: the region
(create, attach, register, views, allocation, close), every method with its tensors and outputs
in shared memory (results equal to the inline calls', ApplyRope in place), torch views, requests
over the message limit sent whole, and the malformed references as structured errors."""

import os
import unittest

import numpy as np

import posenc
from server import ServerProcess, rng, serve_module

try:
    import torch
except ImportError:  # pragma: no cover - deploy/install-deps.sh installs python3-torch
    torch = None

SERVER = CLIENT = None  # set by setUpModule
setUpModule, tearDownModule = serve_module(__name__, "--backend=cpu", "--threads=2",
                                           "--allow_shared_memory")


def exists(key):
    return os.path.exists("/dev/shm" + key)


class RegionTest(unittest.TestCase):
    def test_create_register_status_close(self):
        with posenc.SharedMemory(CLIENT, 1 << 20) as shm:
            self.assertEqual(shm.key, "/" + shm.name)
            self.assertTrue(exists(shm.key))
            [status] = CLIENT.shared_memory_status(shm.name)
            self.assertEqual((status.key, status.byte_size, status.broken),
                             (shm.key, 1 << 20, False))
            self.assertIn(shm.name, [r.name for r in CLIENT.shared_memory_status()])
            self.assertTrue(CLIENT.get_server_info().shared_memory_allowed)
        self.assertTrue(shm.closed)
        self.assertFalse(exists(shm.key))
        with self.assertRaises(posenc.NotFoundError) as cm:
            CLIENT.shared_memory_status(shm.name)
        self.assertEqual(cm.exception.reason, "SHARED_MEMORY_NOT_FOUND")
        shm.close()  # idempotent

    def test_views_allocation_and_references(self):
        with posenc.SharedMemory(CLIENT, 4096, name="views") as shm:
            a = shm.array((3, 5), np.float32)
            b = shm.array(2, "float64")
            self.assertEqual((shm.ref(a).offset, shm.ref(b).offset), (0, 64))  # 64-aligned
            a[...] = np.arange(15).reshape(3, 5)
            self.assertEqual(bytes(shm.buf[:8]), np.arange(2, dtype=np.float32).tobytes())
            ref = shm.ref(a)
            self.assertEqual((ref.region, ref.byte_size, ref.dtype, ref.shape),
                             ("views", 60, posenc.DType.FLOAT32, (3, 5)))
            self.assertEqual(shm.ref(128, 16).byte_size, 16)
            copied = shm.put(np.ones((2, 2), np.int64))
            self.assertEqual(shm.ref(copied).dtype, posenc.DType.INT64)
            with self.assertRaises(posenc.InvalidArgumentError):
                shm.ref(np.zeros(3, np.float32))  # not in the region
            with self.assertRaises(posenc.InvalidArgumentError):
                shm.ref(a[:, ::2])  # not contiguous
            with self.assertRaises(posenc.InvalidArgumentError):
                shm.array((4,), np.float32, offset=4090)
            with self.assertRaises(posenc.ResourceExhaustedError):
                shm.array((2048,), np.float32)
            shm.reset()
            self.assertEqual(shm.ref(shm.array(1, np.float32)).offset, 0)
            kept = a
        # Views outlive close(): the mapping goes with the last of them.
        self.assertEqual(kept[2, 4], 14.0)
        with self.assertRaises(posenc.FailedPreconditionError):
            shm.array(1, np.float32)

    def test_cuda_regions_need_the_cuda_backend(self):
        # A device runs the rest (tests/server/cuda_shared_memory_test.cc).
        with self.assertRaises(posenc.FailedPreconditionError) as cm:
            CLIENT.register_cuda_shared_memory("gpu", b"\x01" * 64, 4096)
        self.assertEqual(cm.exception.field, "raw_handle")
        self.assertIn("--backend=cuda", str(cm.exception))
        with self.assertRaises(posenc.InvalidArgumentError) as cm:
            CLIENT.register_cuda_shared_memory("gpu", b"short", 4096, device_id=0)
        self.assertEqual(cm.exception.field, "raw_handle")
        with posenc.SharedMemory(CLIENT, 4096, name="kinds"):
            [status] = CLIENT.shared_memory_status("kinds")
            self.assertEqual((status.kind, status.device_id),
                             (posenc.SharedMemoryKind.SYSTEM, -1))

    def test_attach_leaves_the_object(self):
        with posenc.SharedMemory(CLIENT, 8192, name="owner") as owner:
            owner.array(4, np.float32)[...] = [1, 2, 3, 4]
            with posenc.SharedMemory(CLIENT, name="attached", key=owner.key,
                                     create=False) as attached:
                self.assertEqual(attached.size, 8192)
                np.testing.assert_array_equal(attached.array(4, np.float32), [1, 2, 3, 4])
            self.assertTrue(exists(owner.key))
            self.assertEqual([r.name for r in CLIENT.shared_memory_status("owner")], ["owner"])
        self.assertFalse(exists(owner.key))

    def test_errors_of_the_region(self):
        with posenc.SharedMemory(CLIENT, 4096, name="taken") as shm:
            with self.assertRaises(posenc.AlreadyExistsError) as cm:
                posenc.SharedMemory(CLIENT, 4096, name="taken")
            self.assertEqual(cm.exception.reason, "SHARED_MEMORY_EXISTS")
            with self.assertRaises(posenc.InvalidArgumentError) as cm:
                CLIENT.register_shared_memory("beyond", shm.key, 8192)
            self.assertEqual(cm.exception.field, "byte_size")
        with self.assertRaises(posenc.NotFoundError):
            CLIENT.unregister_shared_memory("never")
        with self.assertRaises(posenc.InvalidArgumentError):
            posenc.SharedMemory(CLIENT, 0)
        with self.assertRaises(posenc.InvalidArgumentError):
            posenc.SharedMemory(CLIENT, 64, key="no_slash")
        with self.assertRaises(FileNotFoundError):
            posenc.SharedMemory(CLIENT, key="/posenc_no_such_object", create=False)

    def test_shared_memory_off_is_failed_precondition_and_leaves_nothing(self):
        with ServerProcess("--backend=cpu") as server, posenc.Client(server.address) as client:
            key = f"/posenc_py_off_{os.getpid()}"
            with self.assertRaises(posenc.FailedPreconditionError) as cm:
                posenc.SharedMemory(client, 4096, key=key)
            self.assertEqual(cm.exception.reason, "SHARED_MEMORY_UNAVAILABLE")
            self.assertFalse(exists(key))

    def test_over_a_unix_socket(self):
        socket = f"/tmp/posenc_py_shm_{os.getpid()}.sock"
        self.addCleanup(lambda: os.path.exists(socket) and os.remove(socket))
        with ServerProcess("--backend=cpu", "--allow_shared_memory", listen=f"unix://{socket}") as (
                server), posenc.Client(server.address) as client:
            self.assertEqual(server.address, f"unix://{socket}")  # the start-up line names it
            q = rng(9).standard_normal((1, 8, 2, 32)).astype(np.float32)
            expected = client.apply_rope(q)
            with posenc.SharedMemory(client, 4096) as shm:
                view = shm.put(q)
                client.apply_rope(shm.ref(view))
                np.testing.assert_array_equal(view, expected.q)


class OpsTest(unittest.TestCase):
    def setUp(self):
        self.shm = posenc.SharedMemory(CLIENT, 16 << 20)

    def tearDown(self):
        self.shm.close()

    def assert_placed(self, result, expected):
        self.assertIsInstance(result, np.ndarray)
        self.assertTrue(np.shares_memory(result, np.frombuffer(self.shm.buf, np.uint8)))
        self.assertEqual((result.shape, result.dtype), (expected.shape, expected.dtype))
        np.testing.assert_array_equal(result.view(np.uint8), expected.view(np.uint8))

    def place(self, like):
        return self.shm.ref(self.shm.array(like.shape, like.dtype))

    def test_apply_rope_in_place(self):
        q = rng(1).standard_normal((2, 16, 4, 64)).astype(np.float32)
        k = rng(2).standard_normal((2, 16, 2, 64)).astype(np.float32)
        positions = posenc.Positions.offsets([3, 1000])
        config = posenc.RopeConfig(base=500000.0)
        expected = CLIENT.apply_rope(q, k, positions, config)
        q_view, k_view = self.shm.put(q), self.shm.put(k)
        result = CLIENT.apply_rope(self.shm.ref(q_view), self.shm.ref(k_view), positions, config)
        self.assert_placed(result.q, expected.q)
        self.assert_placed(result.k, expected.k)
        np.testing.assert_array_equal(q_view, expected.q)  # in place
        np.testing.assert_array_equal(result.derived.inv_freq, expected.derived.inv_freq)
        # Positions by reference too.
        ids = self.shm.put(np.full(16, 7, np.int64))
        again = CLIENT.apply_rope(self.shm.ref(q_view), None,
                                  posenc.Positions.ids(self.shm.ref(ids)), config)
        np.testing.assert_array_equal(again.q, CLIENT.apply_rope(expected.q, None, ids, config).q)

    def test_an_inline_input_with_its_output_placed(self):
        q = posenc.float32_to_bf16(rng(3).standard_normal((1, 8, 2, 32)))
        expected = CLIENT.apply_rope(q)
        out = self.shm.ref(self.shm.array(q.shape, "bfloat16"))
        result = CLIENT.apply_rope(q, output_shared_memory={"q": out})
        np.testing.assert_array_equal(result.q.view(np.uint16), expected.q.view(np.uint16))

    def test_every_method_writes_its_outputs_into_the_region(self):
        table = CLIENT.sinusoidal(range(5, 305), 64)
        self.assert_placed(CLIENT.sinusoidal(range(5, 305), 64, output_shared_memory={
            "table": self.place(table)}), table)

        x = rng(4).standard_normal((2, 10, 16)).astype(np.float16)
        learned = rng(5).standard_normal((40, 8)).astype(np.float32)
        y = CLIENT.add_position_encoding(x, learned=learned, combine="concat")
        self.assert_placed(CLIENT.add_position_encoding(
            self.shm.ref(self.shm.put(x)), learned=self.shm.ref(self.shm.put(learned)),
            combine="concat", output_shared_memory={"y": self.place(y)}), y)

        cache = CLIENT.rope_cache(range(100), posenc.RopeConfig(head_dim=64), dtype="float64")
        placed = CLIENT.rope_cache(range(100), posenc.RopeConfig(head_dim=64), dtype="float64",
                                   output_shared_memory={"cos": self.place(cache.cos)})
        self.assert_placed(placed.cos, cache.cos)
        np.testing.assert_array_equal(placed.sin, cache.sin)  # not placed: inline

        slopes = CLIENT.alibi_slopes(12)
        self.assert_placed(CLIENT.alibi_slopes(12, output_shared_memory={
            "slopes": self.place(slopes)}), slopes)

        mask = np.ones((2, 50), np.int64)
        alibi = CLIENT.alibi_bias(4, 33, 50, mode="bloom", attention_mask=mask)  # compact, expanded
        placed = CLIENT.alibi_bias(4, 33, 50, mode="bloom",
                                   attention_mask=self.shm.ref(self.shm.put(mask)),
                                   output_shared_memory={"bias": self.place(alibi.bias)})
        self.assert_placed(placed.bias, alibi.bias)

        t5 = rng(6).standard_normal((32, 6)).astype(np.float32)
        bias = CLIENT.relative_bias(20, 30, t5)
        self.assert_placed(CLIENT.relative_bias(20, 30, self.shm.ref(self.shm.put(t5)),
                                                output_shared_memory={"bias": self.place(bias)}),
                           bias)

        shaw = rng(7).standard_normal((9, 16))
        embeddings = CLIENT.relative_embedding(9, 12, 4, shaw)
        self.assert_placed(CLIENT.relative_embedding(
            9, 12, 4, self.shm.ref(self.shm.put(shaw)),
            output_shared_memory={"embeddings": self.place(embeddings)}), embeddings)

    def test_a_placement_by_offset_comes_back_as_a_view_and_a_foreign_one_as_a_reference(self):
        slopes = CLIENT.alibi_slopes(8)
        offset = self.shm.allocate(slopes.nbytes)
        result = CLIENT.alibi_slopes(8, output_shared_memory={
            "slopes": self.shm.ref(offset, slopes.nbytes)})
        self.assert_placed(result, slopes)
        bare = posenc.SharedMemoryRef(self.shm.name, offset, slopes.nbytes)
        result = CLIENT.alibi_slopes(8, output_shared_memory={"slopes": bare})
        self.assertEqual(result, posenc.SharedMemoryRef(self.shm.name, offset, slopes.nbytes,
                                                        posenc.DType.FLOAT32, (8,)))

    def test_requests_over_the_message_limit_are_sent_whole(self):
        with posenc.Client(SERVER.address, max_message_bytes=256 << 10) as small:
            q = rng(8).standard_normal((1, 64, 8, 128)).astype(np.float32)  # 256 KiB
            expected = small.apply_rope(q, q)  # split along heads, inline
            view = self.shm.put(q)
            result = small.apply_rope(self.shm.ref(view), None)
            self.assert_placed(result.q, expected.q)
            buckets = small.relative_bias(300, 400, form="buckets")  # 480 KB: split
            placed = small.relative_bias(300, 400, form="buckets",
                                         output_shared_memory={"bias": self.place(buckets)})
            self.assert_placed(placed, buckets)

    @unittest.skipIf(torch is None, "python3-torch is not installed")
    def test_torch_views_in_and_out(self):
        q = torch.randn(1, 8, 4, 64, dtype=torch.bfloat16)
        expected = CLIENT.apply_rope(q)
        self.assertEqual(expected.q.dtype, torch.bfloat16)
        view = self.shm.tensor(q.shape, torch.bfloat16)
        view.copy_(q)
        result = CLIENT.apply_rope(self.shm.ref(view))
        self.assertIsInstance(result.q, torch.Tensor)
        self.assertEqual(result.q.data_ptr(), view.data_ptr())
        self.assertTrue(torch.equal(view, expected.q))
        cos = self.shm.tensor((16, 32), torch.float32)
        cache = CLIENT.rope_cache(range(16), posenc.RopeConfig(head_dim=64),
                                  output_shared_memory={"cos": self.shm.ref(cos)})
        self.assertIs(type(cache.cos), torch.Tensor)
        np.testing.assert_array_equal(cos.numpy(), CLIENT.rope_cache(
            range(16), posenc.RopeConfig(head_dim=64)).cos)


class ErrorsTest(unittest.TestCase):
    """Every malformed reference is the server's structured error (reason and field)."""

    def test_malformed_references(self):
        with posenc.SharedMemory(CLIENT, 1 << 20) as shm:
            q = shm.put(rng(9).standard_normal((1, 4, 2, 8)).astype(np.float32))
            k = rng(10).standard_normal((1, 4, 1, 8)).astype(np.float32)
            good = shm.ref(q)
            rows = [
                ("unknown region", dict(q=posenc.SharedMemoryRef("nope", 0, 256, good.dtype,
                                                                 good.shape)),
                 posenc.NotFoundError, "SHARED_MEMORY_NOT_FOUND", "q.shared_memory.region"),
                ("wrong size", dict(q=posenc.SharedMemoryRef(shm.name, 0, 4, good.dtype,
                                                             good.shape)),
                 posenc.InvalidArgumentError, "INVALID_FIELD", "q.shared_memory.byte_size"),
                ("beyond the region", dict(q=posenc.SharedMemoryRef(
                    shm.name, (1 << 20) - 8, 256, good.dtype, good.shape)),
                 posenc.InvalidArgumentError, "INVALID_FIELD", "q.shared_memory"),
                ("output overlaps an input", dict(output_shared_memory={"k": shm.ref(64, 128)}),
                 posenc.InvalidArgumentError, "INVALID_FIELD", "output_shared_memory.k"),
                ("output of no such name", dict(output_shared_memory={"cos": shm.ref(8192, 4)}),
                 posenc.InvalidArgumentError, "INVALID_FIELD", "output_shared_memory"),
            ]
            for name, edit, error, reason, field in rows:
                with self.subTest(name):
                    args = dict(q=good, k=k)
                    args.update(edit)
                    with self.assertRaises(error) as cm:
                        CLIENT.apply_rope(**args)
                    self.assertEqual((cm.exception.reason, cm.exception.field), (reason, field),
                                     str(cm.exception))

    def test_local_checks(self):
        with self.assertRaises(posenc.InvalidArgumentError) as cm:
            CLIENT.apply_rope(posenc.SharedMemoryRef("r", 0, 256))  # no dtype or shape
        self.assertEqual((cm.exception.field, cm.exception.details), ("q", "client-side check"))
        with self.assertRaises(posenc.InvalidArgumentError) as cm:
            CLIENT.alibi_slopes(4, output_shared_memory={"slopes": (0, 16)})
        self.assertEqual(cm.exception.field, "output_shared_memory")

    def test_a_truncated_region_fails_its_calls(self):
        with posenc.SharedMemory(CLIENT, 1 << 20) as shm:
            q = shm.put(np.ones((1, 4, 2, 8), np.float32))
            os.truncate("/dev/shm" + shm.key, 64)
            with self.assertRaises(posenc.FailedPreconditionError) as cm:
                CLIENT.apply_rope(shm.ref(q))
            self.assertEqual((cm.exception.reason, cm.exception.field),
                             ("SHARED_MEMORY_UNAVAILABLE", "q.shared_memory.region"))


if __name__ == "__main__":
    unittest.main()
