// What an agent's job does with the real Actions client packages that
// airlock refuses for agent work: a cache save (the v2 cache service,
// twirp), a REST write and a GraphQL mutation with the job's token.
// Each prints what its client says, as a workflow's log would show it.
const fs = require('fs')
const cache = require('@actions/cache')
const github = require('@actions/github')

async function main() {
  fs.mkdirSync('/tmp/cached', {recursive: true})
  fs.writeFileSync('/tmp/cached/f', 'x')
  const start = Date.now()
  try {
    const id = await cache.saveCache(['/tmp/cached'], 'airlock-' + start)
    console.log(`cache save returned ${id}`)
  } catch (e) {
    console.log(`cache save threw: ${e.message}`)
  }
  console.log(`cache save took ${Date.now() - start} ms`)
  const octokit = github.getOctokit(process.env.GITHUB_TOKEN, {baseUrl: process.env.GITHUB_API_URL})
  try {
    await octokit.rest.issues.create({owner: 'acme', repo: 'app', title: 'from the agent'})
    console.log('rest write went through')
  } catch (e) {
    console.log(`rest write threw: ${e.status} ${e.message}`)
  }
  try {
    await octokit.graphql('mutation { addStar(input: {starrableId: "R_1"}) { clientMutationId } }')
    console.log('graphql mutation went through')
  } catch (e) {
    console.log(`graphql mutation threw: ${e.message}`)
  }
}

main()
