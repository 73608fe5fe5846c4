"""The verifier against the official Standard Webhooks vectors (testdata/standard-webhooks-vectors.json)."""

from __future__ import annotations

import json
import pathlib
import unittest

from dispatcher_client import Webhook, WebhookVerificationError

VECTORS = json.loads((pathlib.Path(__file__).parent / "testdata" / "standard-webhooks-vectors.json").read_text())["vectors"]


def keys(v: dict) -> list[str]:
    """The secrets a receiver could hold for the vector: the public key, and the private one."""
    if v["scheme"] == "v1":
        return [v["secret"]]
    out = []
    if v.get("public_key"):
        out.append(v["public_key"])
    if v.get("verify_with") != "public_key" or not v.get("public_key"):
        secret = v["secret"]
        out.append(secret if secret.startswith("whsk_") else "whsk_" + secret)
    return out


class VectorsTest(unittest.TestCase):
    def test_every_vector(self) -> None:
        self.assertGreaterEqual(len(VECTORS), 33)
        for v in VECTORS:
            headers = {
                "webhook-id": v["msg_id"],
                "webhook-timestamp": str(v["timestamp"]),
                "webhook-signature": v["expected_signature"],
            }
            tolerance = 300 if v["enforce_tolerance"] else None
            for key in keys(v):
                with self.subTest(id=v["id"], name=v["name"], key=key[:5]):
                    wh = Webhook(key)
                    if v["should_verify"]:
                        wh.verify(v["payload"], headers, now=v["verify_now"], tolerance=tolerance)
                    else:
                        with self.assertRaises(WebhookVerificationError):
                            wh.verify(v["payload"], headers, now=v["verify_now"], tolerance=tolerance)

    def test_headers_any_case_and_missing(self) -> None:
        v = VECTORS[0]
        wh = Webhook(v["secret"])
        got = wh.verify(
            v["payload"].encode(),
            {"Webhook-Id": v["msg_id"], "WEBHOOK-TIMESTAMP": str(v["timestamp"]), "webhook-signature": v["expected_signature"]},
            now=v["verify_now"],
        )
        self.assertEqual(got, json.loads(v["payload"]))
        with self.assertRaisesRegex(WebhookVerificationError, "missing"):
            wh.verify(v["payload"], {"webhook-id": v["msg_id"]}, now=v["verify_now"])

    def test_bad_secret(self) -> None:
        with self.assertRaisesRegex(ValueError, "invalid webhook secret"):
            Webhook("whsec_!!!")
        with self.assertRaisesRegex(ValueError, "invalid webhook secret"):
            Webhook("whpk_AAAA")


if __name__ == "__main__":
    unittest.main()
