// The benchmark's upload (runner/egress BenchmarkArtifactUploadInSandbox):
// one artifact of FILE with the real @actions/artifact, stored (level 0:
// the time is the upload's, not deflate's), and how long it took.
//
// Usage: node upload-bench.js NAME FILE
const path = require('path')
const {DefaultArtifactClient} = require('@actions/artifact')

async function main() {
  const [name, file] = process.argv.slice(2)
  const start = Date.now()
  const res = await new DefaultArtifactClient().uploadArtifact(name, [file], path.dirname(file), {compressionLevel: 0})
  console.log(`uploaded ${name} ${res.digest} ${res.size} in ${Date.now() - start} ms`)
}

main().catch(e => { console.log(`upload threw: ${e.message}`); process.exit(1) })
