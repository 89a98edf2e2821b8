// Loaded first (node --require) by the tests that drive the real Actions
// clients against the fake GitHub (internal/testhost/clients_test.go):
// names under github.test resolve to the fake's loopback address,
// $FAKE_GITHUB_ADDR, and every other name to nothing. So the host's
// resolver is never asked, and the clients reach the fake and nothing
// else. Node's net and tls, under http, https and fetch alike, call
// dns.lookup at connect time, which is what is wrapped.
'use strict'
const dns = require('dns')

const addr = process.env.FAKE_GITHUB_ADDR
if (!/^127\.\d+\.\d+\.\d+$/.test(addr || '')) {
  throw new Error(`preload: FAKE_GITHUB_ADDR ${addr} is not a loopback address`)
}

function resolve(hostname) {
  const name = String(hostname).toLowerCase().replace(/\.$/, '')
  if (name === 'github.test' || name.endsWith('.github.test')) {
    return addr
  }
  const err = new Error(`getaddrinfo ENOTFOUND ${hostname} (the test resolves only names under github.test)`)
  Object.assign(err, {code: 'ENOTFOUND', errno: -3008, syscall: 'getaddrinfo', hostname})
  throw err
}

function options(opts) {
  if (typeof opts === 'number') return {family: opts}
  return opts || {}
}

dns.lookup = function lookup(hostname, opts, callback) {
  if (typeof opts === 'function') {
    callback = opts
    opts = {}
  }
  opts = options(opts)
  let address
  try {
    address = resolve(hostname)
  } catch (err) {
    process.nextTick(callback, err)
    return {}
  }
  if (opts.all) {
    process.nextTick(callback, null, [{address, family: 4}])
  } else {
    process.nextTick(callback, null, address, 4)
  }
  return {}
}

dns.promises.lookup = async function lookup(hostname, opts) {
  const address = resolve(hostname)
  return options(opts).all ? [{address, family: 4}] : {address, family: 4}
}
