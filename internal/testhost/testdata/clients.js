// The real Actions client packages against the fake GitHub, as
// internal/testhost/clients_test.go runs them:
//
//   node --require preload.js clients.js <mode> <input.json>
//
// with NODE_PATH at testdata/clients/node_modules. What the clients
// returned is written to $RESULT as JSON. Modes:
//
//   artifact  @actions/artifact: uploadArtifact, then downloadArtifact
//             by the id it returned, checking the digest
//   cache     @actions/cache (v2 service): saveCache, restoreCache of
//             the key, of a missing key, and by a restore key
//   refuse    @azure/storage-blob operations the blob store must refuse:
//             what error each raised (statusCode, code, errorCode)
'use strict'
const fs = require('fs')

async function artifact({name, root, files, retentionDays, download}) {
  const {DefaultArtifactClient} = require('@actions/artifact')
  const client = new DefaultArtifactClient()
  const up = await client.uploadArtifact(name, files, root, {retentionDays})
  const down = await client.downloadArtifact(up.id, {path: download, expectedHash: `sha256:${up.digest}`})
  return {id: up.id, size: up.size, digest: up.digest, digestMismatch: down.digestMismatch}
}

async function cache({paths, key, missKey, restoreKey}) {
  const cache = require('@actions/cache')
  const id = await cache.saveCache(paths, key)
  for (const p of paths) {
    fs.rmSync(p, {recursive: true, force: true})
  }
  const restored = await cache.restoreCache(paths, key)
  const miss = await cache.restoreCache(paths, missKey)
  const byRestoreKey = await cache.restoreCache(paths, missKey, [restoreKey])
  return {id, restored: restored ?? null, miss: miss ?? null, byRestoreKey: byRestoreKey ?? null}
}

async function refuse(cases) {
  const {BlockBlobClient} = require('@azure/storage-blob')
  const out = []
  for (const c of cases) {
    const blob = new BlockBlobClient(c.url)
    try {
      switch (c.op) {
        case 'stageBlock':
          await blob.stageBlock(c.block, Buffer.from('x'), 1)
          break
        case 'commitBlockList':
          await blob.commitBlockList([c.block])
          break
        case 'upload':
          await blob.upload(Buffer.from('x'), 1)
          break
        case 'downloadToBuffer':
          await blob.downloadToBuffer()
          break
        default:
          throw new Error(`unknown op ${c.op}`)
      }
      out.push({status: 0, code: 'no error', errorCode: ''})
    } catch (e) {
      // code is from the XML body, details.errorCode from the
      // x-ms-error-code header (all a HEAD's refusal has).
      out.push({status: e.statusCode ?? -1, code: e.code ?? String(e), errorCode: e.details?.errorCode ?? ''})
    }
  }
  return out
}

const [mode, inputFile] = process.argv.slice(2)
const run = {artifact, cache, refuse}[mode]
if (!run) {
  throw new Error(`unknown mode ${mode}`)
}
run(JSON.parse(fs.readFileSync(inputFile, 'utf8'))).then(
  result => fs.writeFileSync(process.env.RESULT, JSON.stringify(result)),
  err => {
    console.error(err && err.stack ? err.stack : err)
    process.exitCode = 1
  }
)
