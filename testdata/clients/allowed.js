// What a human's job does with the real Actions client packages, which
// airlock lets through for a human's pull request: a cache save and a
// restore of it (the v2 cache service: twirp, then the blob storage
// behind its signed URLs), and a REST write and a GraphQL query with the
// job's token. Each prints what its client says.
const fs = require('fs')
const cache = require('@actions/cache')
const github = require('@actions/github')

async function main() {
  const key = 'airlock-human-' + Date.now()
  fs.mkdirSync('/tmp/cached', {recursive: true})
  fs.writeFileSync('/tmp/cached/f', 'cached by a human job\n')
  try {
    const id = await cache.saveCache(['/tmp/cached'], key)
    console.log(`cache save returned ${id}`)
  } catch (e) {
    console.log(`cache save threw: ${e.message}`)
  }
  fs.rmSync('/tmp/cached', {recursive: true})
  try {
    const hit = await cache.restoreCache(['/tmp/cached'], key)
    console.log(`cache restore hit ${hit}: ${fs.readFileSync('/tmp/cached/f', 'utf8').trim()}`)
  } catch (e) {
    console.log(`cache restore threw: ${e.message}`)
  }
  const octokit = github.getOctokit(process.env.GITHUB_TOKEN, {baseUrl: process.env.GITHUB_API_URL})
  try {
    const res = await octokit.rest.issues.create({owner: 'acme', repo: 'app', title: 'from a human'})
    console.log(`rest write answered ${res.status}`)
  } catch (e) {
    console.log(`rest write threw: ${e.status} ${e.message}`)
  }
}

main()
