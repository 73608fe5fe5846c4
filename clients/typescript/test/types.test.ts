// Compile-time checks of the generated types: `npm test` compiles this file
// first, and each @ts-expect-error fails the build if the line it marks
// were accepted. At run time it only checks it was compiled.
import assert from "node:assert/strict";
import { test } from "node:test";

import { createDispatcherClient, type Event, type Filter } from "../src/index.js";

const client = createDispatcherClient({ baseUrl: "http://127.0.0.1:1", token: "unused" });

// Never called: the calls are here for the compiler.
export async function typed(): Promise<void> {
  // Each type's data is typed by its catalog schema.
  await client.POST("/v1/events:publish", {
    // @ts-expect-error booking.created's booking_id is a string
    body: { event: { owner_id: "a", type: "booking.created", subject: "booking://1", data: { booking_id: 5 } } },
  });
  await client.POST("/v1/events:publish", {
    // @ts-expect-error no such event type in the catalog
    body: { event: { owner_id: "a", type: "booking.creatd", subject: "booking://1" } },
  });
  // snake_case, and owner_id required.
  await client.POST("/v1/endpoints", {
    // @ts-expect-error eventTypes is not the name: event_types is
    body: { owner_id: "a", url: "https://x", eventTypes: ["*"] },
  });
  await client.GET("/v1/endpoints", {
    // @ts-expect-error owner_id is required
    params: { query: {} },
  });
  // A Filter is what the API takes as a filter.
  const filter: Filter = { "data.op": { $in: ["published"] }, $or: [{ subject: { $startsWith: "wiki://" } }, { "data.n": 3 }] };
  await client.POST("/v1/endpoints", { body: { owner_id: "a", url: "https://x", event_types: ["*"], filter } });
  await client.POST("/v1/filters:test", { body: { owner_id: "a", filter, event_id: "e1" } });
  // @ts-expect-error $exists is not an operator: $exist is
  const misspelt: Filter = { "data.op": { $exists: true } };
  // @ts-expect-error a field is "subject" or "data.<path>"
  const outside: Filter = { status: "published" };
  void misspelt;
  void outside;
}

// narrow shows that an event's type narrows its data.
export function narrow(e: Event): string | undefined {
  if (e.type === "booking.created") {
    return e.data?.booking_id;
  }
  return undefined;
}

test("the generated types are strict (checked when compiled)", () => {
  assert.equal(typeof typed, "function");
});
