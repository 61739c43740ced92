"""Every row of tests/server/malformed_requests_test.cc through the Python client: the request's
bytes sent as they are, the error read back from posenc.PosencError (code, message, reason, domain,
field) as the server answered it to the C++ test. server_test writes the rows
(MalformedRequestsTableTest, a ctest fixture) to the file POSENC_MALFORMED_ROWS names: one JSON
object per line with name, method, request (base64), code, message, reason and field."""

import base64
import json
import os
import unittest

import grpc

import posenc
from server import ServerProcess

ROWS = os.environ.get("POSENC_MALFORMED_ROWS", "")


def load_rows():
    with open(ROWS, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@unittest.skipUnless(os.path.isfile(ROWS), "no malformed-request rows (ctest's "
                     "python_errors_rows writes them; POSENC_MALFORMED_ROWS names the file)")
class MalformedRowsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ServerProcess("--threads=1")
        cls.client = posenc.Client(cls.server.address, timeout=60)

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.server.stop()

    def call(self, method, request):
        """The request's bytes as they are, through the client's channel; the typed error."""
        rpc = self.client.channel.unary_unary(f"/posenc.v1.PositionEncoding/{method}")
        try:
            rpc(request, timeout=60)
        except grpc.RpcError as e:
            return posenc.PosencError.from_rpc_error(e, method)
        self.fail(f"{method}: the malformed request succeeded")

    def test_every_row_reads_back_as_the_server_answered(self):
        rows = load_rows()
        self.assertGreaterEqual(len(rows), 50)
        for row in rows:
            with self.subTest(row["name"]):
                e = self.call(row["method"], base64.b64decode(row["request"]))
                self.assertIsInstance(e, posenc.PosencError)
                self.assertEqual((e.code.value[0], e.message), (row["code"], row["message"]))
                self.assertIs(type(e).CODE, e.code)
                self.assertEqual(e.reason, row["reason"] or None)
                self.assertEqual(e.domain, posenc.DOMAIN if row["reason"] else None)
                if row["reason"]:  # without details, field is parsed from the message
                    self.assertEqual(e.field, row["field"] or None)
                if row["field"]:
                    self.assertEqual(e.message, f"{e.field}: {e.description}")
                    self.assertEqual(e.violations[0].field, row["field"])
                self.assertEqual(e.method, row["method"])


if __name__ == "__main__":
    unittest.main()
