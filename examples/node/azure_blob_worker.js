#!/usr/bin/env node
// A fencegate worker in Node.js with @azure/storage-blob, against an Azure
// route.
//
// Takes the lease on CONTAINER/BLOB (the route's "{container}/{blob}"
// resource) over the coordinator's HTTP API, or uses FENCING_TOKEN from
// `fencegate lease run`, and uploads the blob through the gateway with
// the token in the Fencing-Token header, added by a pipeline policy. The
// worker signs with Shared Key credentials of its own (one of the route's
// azure.clients); the gateway signs its forwards with the store account's
// key, which the worker does not hold.
//
// A stale refusal (409, error code stale_fencing_token) means a newer
// owner exists: the upload had no effect, and the worker stops. It must
// not retry with the same token (the SDK's retries are off: a 409 is not
// retried anyway, and a retried timeout could land after a newer owner).
//
//     azure_blob_worker.js CONTAINER BLOB VALUE
//     env: FENCEGATE_COORDINATOR, FENCEGATE_URL (the gateway), FENCEGATE_OWNER,
//          AZURE_STORAGE_ACCOUNT / AZURE_STORAGE_KEY (the worker's own Shared
//          Key from the route's azure.clients)
//     exit: 0 written, 3 refused as stale (stopped), 1 other failure
//
// @azure/storage-blob is pinned in tools/azurite/package.json (npm ci);
// run with NODE_PATH pointing at that node_modules, or install it beside.
"use strict";

const os = require("os");
const { BlobServiceClient, StorageSharedKeyCredential, newPipeline } = require("@azure/storage-blob");

const COORDINATOR = process.env.FENCEGATE_COORDINATOR || "http://127.0.0.1:8081";
const GATEWAY = process.env.FENCEGATE_URL || "http://127.0.0.1:8080";
const OWNER = process.env.FENCEGATE_OWNER || `node-${os.hostname()}-${process.pid}`;
const EXIT_STALE = 3;

async function call(path, body) {
  const resp = await fetch(COORDINATOR + path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const doc = await resp.json();
  if (!resp.ok) {
    throw new Error(`${path}: ${resp.status} ${doc.error}: ${doc.message}`);
  }
  return doc;
}

// fencingPolicy sets the Fencing-Token header on every request of the
// pipeline. It is not an x-ms-* header, so Shared Key does not sign it;
// the gateway removes it before it forwards.
function fencingPolicy(token) {
  return {
    create(nextPolicy) {
      return {
        sendRequest(request) {
          request.headers.set("Fencing-Token", String(token));
          return nextPolicy.sendRequest(request);
        },
      };
    },
  };
}

async function main() {
  const [container, blob, value] = process.argv.slice(2);
  if (!value) {
    console.error("usage: azure_blob_worker.js CONTAINER BLOB VALUE");
    return 1;
  }
  const resource = `${container}/${blob}`;
  let token = process.env.FENCING_TOKEN ? Number(process.env.FENCING_TOKEN) : 0;
  let lease = null;
  if (!token) {
    lease = await call("/v1/leases/acquire", { resource, owner: OWNER, ttl: "30s", wait: "10s" });
    token = lease.token;
  }
  const cred = new StorageSharedKeyCredential(process.env.AZURE_STORAGE_ACCOUNT, process.env.AZURE_STORAGE_KEY);
  const pipeline = newPipeline(cred, { retryOptions: { maxTries: 1 } });
  pipeline.factories.unshift(fencingPolicy(token));
  const svc = new BlobServiceClient(GATEWAY + "/", pipeline);
  const client = svc.getContainerClient(container).getBlockBlobClient(blob);
  try {
    await client.upload(value, Buffer.byteLength(value));
    console.log(`wrote ${resource} with token ${token}`);
    return 0;
  } catch (err) {
    if (err.statusCode === 409 && err.code === "stale_fencing_token") {
      // A newer owner exists: stop, do not retry with this token.
      console.error(`stale_fencing_token: ${resource}: token ${token} is older than the blob's fence; stopping`);
      return EXIT_STALE;
    }
    throw err;
  } finally {
    if (lease) {
      await call("/v1/leases/release", { resource, owner: OWNER, token }).catch(() => {});
    }
  }
}

main().then(
  (code) => process.exit(code),
  (err) => {
    console.error(err.message || err);
    process.exit(1);
  },
);
