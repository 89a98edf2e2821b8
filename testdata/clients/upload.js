// What a job does with the real @actions/artifact (the client
// actions/upload-artifact v4 runs): an honest upload of a directory, and
// a dishonest one that commits one blob and claims another's hash in
// FinalizeArtifact, as a tampering job would, through the same internal
// twirp client and @azure/storage-blob. Each prints what happened, as a
// workflow's log would show it.
//
// Usage: node upload.js DIR
const crypto = require('crypto')
const fs = require('fs')
const path = require('path')
const {DefaultArtifactClient} = require('@actions/artifact')
const {internalArtifactTwirpClient} = require('@actions/artifact/lib/internal/shared/artifact-twirp-client')
const {getBackendIdsFromToken} = require('@actions/artifact/lib/internal/shared/util')
const {BlobClient} = require('@azure/storage-blob')

async function honest(dir) {
  const files = fs.readdirSync(dir).map(f => path.join(dir, f))
  const start = Date.now()
  const res = await new DefaultArtifactClient().uploadArtifact('honest', files, dir)
  console.log(`honest upload: id ${res.id} digest ${res.digest} size ${res.size} in ${Date.now() - start} ms`)
}

async function lying() {
  const ids = getBackendIdsFromToken()
  const client = internalArtifactTwirpClient()
  const created = await client.CreateArtifact({...ids, name: 'lying', version: 4})
  const blob = Buffer.from('the bytes the job really uploads\n')
  await new BlobClient(created.signedUploadUrl).getBlockBlobClient().uploadData(blob)
  const claimed = crypto.createHash('sha256').update('what the job claims it uploaded\n').digest('hex')
  try {
    await client.FinalizeArtifact({...ids, name: 'lying', size: String(blob.length), hash: {value: `sha256:${claimed}`}})
    console.log('lying finalize went through')
  } catch (e) {
    console.log(`lying finalize threw: ${e.message}`)
  }
}

async function main() {
  try {
    await honest(process.argv[2])
  } catch (e) {
    console.log(`honest upload threw: ${e.message}`)
  }
  try {
    await lying()
  } catch (e) {
    console.log(`lying upload threw: ${e.message}`)
  }
}

main()
