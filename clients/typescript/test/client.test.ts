// The client against a real dispatcher: the Go e2e test TestTypeScriptClient
// builds and starts the binary (loopback receivers allowed) and runs
// `npm test` with its address and tokens in the environment.
import assert from "node:assert/strict";
import { once } from "node:events";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { Webhook } from "standardwebhooks";

import { createDispatcherClient, must, ProblemError, type Delivery, type Filter } from "../src/index.js";

function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run this through the Go test TestTypeScriptClient (e2e/)`);
  return v;
}

const baseUrl = env("DISPATCHER_URL");
const admin = createDispatcherClient({ baseUrl, token: env("DISPATCHER_ADMIN_TOKEN") });
const publisher = createDispatcherClient({ baseUrl, token: env("DISPATCHER_PUBLISHER_TOKEN") });

interface Received {
  headers: Record<string, string>;
  body: string;
}

// A loopback receiver: 503 until up, then 204; it keeps every request.
async function startReceiver() {
  const received: Received[] = [];
  let up = false;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === "string") headers[k] = v;
      received.push({ headers, body: Buffer.concat(chunks).toString("utf8") });
      res.writeHead(up ? 204 : 503).end();
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/hook`,
    received,
    setUp: () => {
      up = true;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

// waitFor polls check until it answers a value; the bound is a liveness
// bound for a loaded machine, not a speed expectation.
async function waitFor<T>(what: string, check: () => Promise<T | undefined>, ms = 60_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

test("filters: created with an endpoint, tested against a sample, refused with the spot named", async () => {
  const owner = "owner-ts-filters";
  const filter: Filter = { "data.op": { $in: ["published"] } };
  const { endpoint } = must(
    await admin.POST("/v1/endpoints", {
      body: { owner_id: owner, url: "https://hooks.example.com/in", event_types: ["corpus.*"], filter },
    }),
  );
  assert.deepEqual(endpoint?.filter, filter);

  const tested = must(
    await admin.POST("/v1/filters:test", {
      body: {
        owner_id: owner,
        endpoint_id: endpoint!.id,
        sample: { owner_id: owner, type: "corpus.note.changed", subject: "wiki://x", data: { op: "updated", published: true } },
      },
    }),
  );
  assert.equal(tested.matched, false);
  assert.equal(tested.explanation, 'filter: data.op was "updated", wanted one of ["published"]');

  const bad = await admin.POST("/v1/endpoints", {
    body: { owner_id: owner, url: "https://hooks.example.com/in", event_types: ["corpus.*"], filter: { "data.opp": "published" } },
  });
  assert.equal(bad.response.status, 400);
  assert.equal(bad.error?.field_violations?.[0]?.field, "filter.data.opp");
  assert.match(bad.error?.field_violations?.[0]?.description ?? "", /did you mean "data.op"\?/);
});

test("create, publish, deliveries, attempts, retry; deliveries verify with standardwebhooks", async (t) => {
  const owner = "owner-ts";
  const receiver = await startReceiver();
  t.after(() => receiver.close());

  const created = await admin.POST("/v1/endpoints", {
    body: { owner_id: owner, url: receiver.url, event_types: ["booking.*"], name: "from TypeScript" },
    headers: { "Idempotency-Key": "ts-create-1" },
  });
  assert.equal(created.response.status, 201);
  const { endpoint, secret } = must(created);
  assert.ok(endpoint, "the endpoint");
  assert.match(secret, /^whsec_/);
  assert.equal(created.response.headers.get("location"), `/v1/endpoints/${endpoint.id}?owner_id=${owner}`);

  const published = must(
    await publisher.POST("/v1/events:publish", {
      body: {
        event: {
          owner_id: owner,
          type: "booking.created",
          subject: "booking://ts-1",
          data: { booking_id: "bk_ts", starts_at: "2026-12-03T15:00:00Z", ends_at: "2026-12-03T15:30:00Z" },
        },
      },
    }),
  );
  assert.equal(published.outcome, "PUBLISH_OUTCOME_STORED");
  assert.match(published.event_id, /^[0-9a-f-]{36}$/, "the server assigned a UUIDv7");
  assert.ok(published.occurred_at, "and the time");

  // The first attempt arrives (503), signed.
  const first = await waitFor("the first attempt", async () => receiver.received[0]);
  const wh = new Webhook(secret);
  const payload = wh.verify(first.body, first.headers) as { id: string; type: string; data: { booking_id: string } };
  assert.equal(payload.id, published.event_id);
  assert.equal(payload.type, "booking.created");
  assert.equal(payload.data.booking_id, "bk_ts");
  assert.throws(() => new Webhook("whsec_" + Buffer.alloc(32, 1).toString("base64")).verify(first.body, first.headers),
    "another secret does not verify");

  // One failure makes the endpoint failing: its delivery is held, and only
  // a recovery probe (15 s after the failure) reaches the receiver. A failed
  // probe spends none of the delivery's attempts and leaves it waiting
  // minutes for its next scheduled step.
  const waiting = await waitFor("the delivery to wait minutes after a failed probe", async () => {
    const { deliveries } = must(
      await admin.GET("/v1/endpoints/{endpoint_id}/deliveries", {
        params: { path: { endpoint_id: endpoint.id }, query: { owner_id: owner } },
      }),
    );
    const d: Delivery | undefined = deliveries[0];
    if (d?.state === "DELIVERY_STATE_SCHEDULED" && d.probes >= 1 && d.scheduled_at && Date.parse(d.scheduled_at) - Date.now() > 60_000) {
      return d;
    }
    return undefined;
  });
  assert.equal(waiting.wait_reason, "DELIVERY_WAIT_REASON_RETRY");
  assert.equal(waiting.attempt, 1, "probes spend no attempt");
  assert.equal(waiting.event_id, published.event_id);

  const attempts = await waitFor("the recorded attempts", async () => {
    const { attempts } = must(
      await admin.GET("/v1/deliveries/{delivery_id}/attempts", {
        params: { path: { delivery_id: waiting.id }, query: { owner_id: owner } },
      }),
    );
    return attempts.length >= 2 ? attempts : undefined;
  });
  for (const a of attempts) {
    assert.equal(a.http_status, 503);
    assert.equal(a.outcome, "ATTEMPT_OUTCOME_HTTP_5XX");
  }

  // Retry now, rather than in minutes.
  receiver.setUp();
  const retried = must(
    await admin.POST("/v1/deliveries/{delivery_id}:retry", {
      params: { path: { delivery_id: waiting.id } },
      body: { owner_id: owner },
    }),
  );
  assert.equal(retried.delivery?.state, "DELIVERY_STATE_PENDING");
  const delivered = await waitFor("the retried delivery", async () => {
    const { delivery } = must(
      await admin.GET("/v1/deliveries/{delivery_id}", { params: { path: { delivery_id: waiting.id }, query: { owner_id: owner } } }),
    );
    return delivery?.state === "DELIVERY_STATE_DELIVERED" ? delivery : undefined;
  });
  const last = receiver.received[receiver.received.length - 1]!;
  assert.equal(last.headers["webhook-id"], published.event_id, "every retry carries the same webhook-id");
  assert.deepEqual(wh.verify(last.body, last.headers), payload);
  assert.equal(receiver.received.length, delivered.attempt + delivered.probes, "one request per attempt or probe");

  // A second retry is refused: a problem, typed.
  const again = await admin.POST("/v1/deliveries/{delivery_id}:retry", {
    params: { path: { delivery_id: waiting.id } },
    body: { owner_id: owner },
  });
  assert.equal(again.response.status, 400);
  assert.equal(again.response.headers.get("content-type"), "application/problem+json");
  assert.equal(again.error?.code, "FAILED_PRECONDITION");
  assert.throws(() => must(again), ProblemError);

  // Resent when asked: once more, with the same webhook-id.
  const before = receiver.received.length;
  const resent = must(
    await admin.POST("/v1/deliveries/{delivery_id}:retry", {
      params: { path: { delivery_id: waiting.id } },
      body: { owner_id: owner, resend: true },
    }),
  );
  assert.equal(resent.delivery?.id, waiting.id);
  const resend = await waitFor("the resend", async () => receiver.received[before]);
  assert.equal(resend.headers["webhook-id"], published.event_id, "a resend carries the same webhook-id");

  // Bad input names the field.
  const bad = await admin.GET("/v1/endpoints", {
    params: { query: { owner_id: owner, page_size: 500 } },
  });
  assert.equal(bad.response.status, 400);
  assert.deepEqual(bad.error?.field_violations?.map((v) => v.field), ["page_size"]);
});
