/**
 * Several kube-apiservers on one etcd, in a network namespace of this file's own (see
 * helpers/network-namespace.ts): their addresses exist only on its `lo`.
 */
import { networkNamespace } from '../helpers/network-namespace.js'
import { execFileSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { chmod, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { request as httpsRequest } from 'node:https'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { checkServerIdentity, type PeerCertificate, type TLSSocket } from 'node:tls'
import t from 'tap'
import { attachControlPlane, KUBERNETES_ENDPOINTSLICES, startControlPlane, type ControlPlane } from '../../dev/controlplane/controlplane.js'
import { claimLoopbackAddresses, loopbackIpv4Addresses, releaseLoopbackAddresses } from '../../dev/controlplane/loopback.js'
import { currentNetworkNamespace } from '../../dev/controlplane/netns.js'
import { clientsFor, startPrivateControlPlane, twoVersionCrd, uniqueGroup, waitForCrdEstablished } from '../helpers/controlplane.js'
import { until } from '../helpers/until.js'

t.equal(currentNetworkNamespace(), networkNamespace, `this file runs in network namespace ${networkNamespace}`)

/** Addresses and ports of the `default/kubernetes` EndpointSlices, as server `apiserver` sees them. */
async function kubernetesSlices(
  cp: ControlPlane,
  apiserver = 1,
): Promise<{ addresses: string[]; ports: Array<{ name?: string; port?: number }> }> {
  const res = await cp.apiRequest(KUBERNETES_ENDPOINTSLICES, { apiserver })
  if (res.status !== 200) throw new Error(`GET ${KUBERNETES_ENDPOINTSLICES}: HTTP ${res.status}: ${res.body.slice(0, 300)}`)
  const items = (res.json as { items: any[] }).items
  return {
    addresses: items.flatMap((s) => (s.endpoints ?? []).flatMap((e: any) => e.addresses ?? [])).sort(),
    ports: items.flatMap((s) => s.ports ?? []),
  }
}

/**
 * GET /readyz from `address` with a plain https client that trusts only the control plane's CA
 * and verifies the serving certificate for that IP (Node's default checkServerIdentity).
 */
function readyzAt(address: string, port: number, caPem: string, timeoutMs = 5_000): Promise<{ status: number; cert: PeerCertificate }> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest({ host: address, port, path: '/readyz', ca: caPem, agent: false, timeout: timeoutMs }, (res) => {
      const cert = (res.socket as TLSSocket).getPeerCertificate()
      res.resume()
      res.on('end', () => resolve({ status: res.statusCode ?? 0, cert }))
    })
    req.on('timeout', () => req.destroy(Object.assign(new Error(`GET https://${address}:${port}/readyz timed out`), { code: 'ETIMEDOUT' })))
    req.on('error', reject)
    req.end()
  })
}

t.test('three API servers on one etcd', async (t) => {
  const t0 = Date.now()
  const multi = await startPrivateControlPlane({ apiservers: 3 })
  t.comment(`3 API servers started in ${Date.now() - t0}ms: ${JSON.stringify(multi.timings)}`)
  const port = Number(new URL(multi.server).port)
  const addresses = multi.apiservers.map((a) => a.address)

  t.test("each server has its own address of one /24 on the namespace's lo, all one port, its own kubeconfig and log", async (t) => {
    t.equal(multi.networkNamespace, networkNamespace, 'the control plane knows its namespace')
    t.same(
      multi.apiservers.map((a) => a.index),
      [1, 2, 3],
    )
    const third = addresses[0]!.split('.')[2]
    t.same(
      addresses,
      [1, 2, 3].map((i) => `198.18.${third}.${i}`),
    )
    t.same(
      multi.apiservers.map((a) => a.server),
      addresses.map((a) => `https://${a}:${port}`),
    )
    t.equal(multi.server, multi.apiservers[0]!.server, 'cp.server is the first server')
    t.equal(multi.kubeconfigPath, multi.apiservers[0]!.kubeconfigPath, 'cp.kubeconfigPath is the first server')
    t.equal(new Set(multi.apiservers.map((a) => a.kubeconfigPath)).size, 3)
    t.equal(new Set(multi.logFiles?.apiservers).size, 3)
    const onLo = await loopbackIpv4Addresses()
    for (const a of addresses) t.ok(onLo.includes(a), `${a} is on the namespace's lo`)
  })

  t.test('the default/kubernetes EndpointSlice lists every server with the https port', async (t) => {
    // startControlPlane waits for this too; asked here of every server, on evidence.
    for (const a of multi.apiservers) {
      const slices = await until(
        `server ${a.index} sees all three in the EndpointSlice`,
        30_000,
        () => kubernetesSlices(multi, a.index),
        (s) => JSON.stringify(s.addresses) === JSON.stringify([...addresses].sort()),
      )
      t.same(slices.addresses, [...addresses].sort(), `as server ${a.index} sees it`)
      t.match(slices.ports, [{ name: 'https', port }])
    }
  })

  t.test('each server has its own hostname, so its own identity lease', async (t) => {
    const hostnames = await until(
      'three identity leases (their hostnames last)',
      30_000,
      async () => {
        const res = await multi.apiRequest(
          '/apis/coordination.k8s.io/v1/namespaces/kube-system/leases?labelSelector=apiserver.kubernetes.io%2Fidentity%3Dkube-apiserver',
        )
        return ((res.json as { items?: any[] }).items ?? []).map((l): string => l.metadata.labels['kubernetes.io/hostname']).sort()
      },
      (names) => names.length === 3,
    )
    t.same(hostnames, ['kube-apiserver-1', 'kube-apiserver-2', 'kube-apiserver-3'])
  })

  t.test('each server answers /readyz on its own address, with a certificate valid for that IP', async (t) => {
    for (const a of multi.apiservers) {
      const res = await readyzAt(a.address, port, multi.caPem)
      t.equal(res.status, 200, `${a.server}/readyz`)
      t.equal(checkServerIdentity(a.address, res.cert), undefined, `certificate is valid for ${a.address}`)
    }
    const probe = await readyzAt(addresses[0]!, port, multi.caPem)
    const outsider = addresses[0]!.replace(/\.1$/, '.200')
    t.type(checkServerIdentity(outsider, probe.cert), Error, `and not for ${outsider}`)
  })

  t.test('a CRD created through server 1 is served by server 3', async (t) => {
    const { group, plural, kind, name, crd } = twoVersionCrd(uniqueGroup('multi'))
    // Raw JSON: client-node's typed serializer would drop `x-kubernetes-preserve-unknown-fields` (and so prune `spec`).
    const created = await multi.apiRequest('/apis/apiextensions.k8s.io/v1/customresourcedefinitions', {
      apiserver: 1,
      method: 'POST',
      body: crd,
    })
    t.equal(created.status, 201, 'created through server 1')
    const via1 = clientsFor(multi.apiservers[0]!.kubeconfigPath)
    await waitForCrdEstablished(via1.apiext, name)
    const path = `/apis/${group}/v1/namespaces/default/${plural}`
    await until(
      `server 3 serves ${path} (its HTTP status last)`,
      30_000,
      async () => (await multi.apiRequest(`${path}?limit=1`, { apiserver: 3 })).status,
      (status) => status === 200,
    )
    const via3 = clientsFor(multi.apiservers[2]!.kubeconfigPath)
    await via3.custom.createNamespacedCustomObject({
      group,
      version: 'v1',
      namespace: 'default',
      plural,
      body: { apiVersion: `${group}/v1`, kind, metadata: { name: 'one' }, spec: { size: 3 } },
    })
    const read = await multi.apiRequest(`${path}/one`, { apiserver: 1 })
    t.equal(read.status, 200, 'server 1 reads what server 3 wrote')
    t.match(read.json, { spec: { size: 3 } })
    t.equal(await multi.storedApiVersion(group, plural, 'default', 'one'), `${group}/v1`)
    await via1.apiext.deleteCustomResourceDefinition({ name })
  })

  t.test('a paused server times out while the others answer; resumed, it answers', async (t) => {
    await multi.pauseApiserver(2)
    try {
      const [paused, first] = await Promise.allSettled([
        multi.apiRequest('/readyz', { apiserver: 2, timeoutMs: 1_500 }),
        multi.apiRequest('/readyz', { apiserver: 1, timeoutMs: 5_000 }),
      ])
      t.equal(paused.status, 'rejected', 'server 2 does not answer')
      // The client's connection errors name the server and the errno (src/kube/connection-errors.ts).
      t.match(paused.status === 'rejected' ? paused.reason : undefined, { code: 'CRDM_UNREACHABLE', errno: 'ETIMEDOUT' })
      t.equal(first.status === 'fulfilled' ? first.value.status : first.reason, 200, 'server 1 answers meanwhile')
      await t.rejects(readyzAt(addresses[1]!, port, multi.caPem, 1_000), { code: 'ETIMEDOUT' }, 'not even the TLS handshake')
    } finally {
      await multi.resumeApiserver(2)
    }
    const res = await multi.apiRequest('/readyz', { apiserver: 2, timeoutMs: 10_000 })
    t.equal(res.status, 200, 'server 2 answers again')
  })

  t.test('one server stops and starts alone, leaving and rejoining the EndpointSlice', async (t) => {
    const others = [addresses[0]!, addresses[2]!].sort()
    await multi.stopApiserver({ index: 2 })
    t.equal((await multi.apiRequest('/readyz', { apiserver: 1 })).status, 200, 'server 1 still answers')
    await t.rejects(
      multi.apiRequest('/readyz', { apiserver: 2, timeoutMs: 2_000 }),
      { code: 'CRDM_UNREACHABLE', errno: 'ECONNREFUSED' },
      'server 2 is gone',
    )
    const listed = await until(
      'server 2 to leave the EndpointSlice (the addresses listed last)',
      30_000,
      async () => (await kubernetesSlices(multi)).addresses,
      (addresses) => JSON.stringify(addresses) === JSON.stringify(others),
    )
    t.pass(`a gracefully stopped server removes itself: ${listed.join(', ')}`)
    await multi.startApiserver({ index: 2 })
    t.same((await kubernetesSlices(multi, 2)).addresses, [...addresses].sort(), 'started again, it is listed again')
  })

  t.test('the state file carries every server', async (t) => {
    const dir = await mkdtemp(join(tmpdir(), 'crd-migrator-state-'))
    t.teardown(() => rm(dir, { recursive: true, force: true }))
    await multi.writeStateFile(join(dir, 'state.json'))
    const attached = await attachControlPlane(join(dir, 'state.json'))
    t.teardown(() => attached.stop())
    t.same(attached.apiservers, multi.apiservers)
    t.equal(attached.server, multi.server)
    t.equal(attached.networkNamespace, networkNamespace, 'and its network namespace')
    t.equal((await attached.apiRequest('/readyz', { apiserver: 3 })).status, 200)
    await t.rejects(attached.pauseApiserver(1), /shared/)
    await t.rejects(attached.stopApiserver({ index: 1 }), /shared/)
  })

  t.test("stop removes the addresses from the namespace's lo", async (t) => {
    await multi.stop()
    const onLo = await loopbackIpv4Addresses()
    for (const a of addresses) t.notOk(onLo.includes(a), `${a} is gone from lo`)
    t.notOk(existsSync(multi.dir), 'temp dir removed')
  })
})

t.test('parallel claims of loopback addresses never share a /24', async (t) => {
  const claims = await Promise.all(Array.from({ length: 6 }, () => claimLoopbackAddresses(3)))
  try {
    const nets = claims.map((c) => c[0]!.split('.').slice(0, 3).join('.'))
    t.equal(new Set(nets).size, 6, `six different /24s: ${nets.join(' ')}`)
    for (const c of claims)
      t.same(
        c.map((a) => a.split('.')[3]),
        ['1', '2', '3'],
      )
  } finally {
    await Promise.all(claims.map((c) => releaseLoopbackAddresses(c)))
  }
  const onLo = await loopbackIpv4Addresses()
  t.notOk(
    claims.flat().some((a) => onLo.includes(a)),
    'released',
  )
})

t.test('several API servers without CAP_NET_ADMIN: the start fails naming the requirement', async (t) => {
  // An `ip` first on PATH that runs the real one without CAP_NET_ADMIN: the kernel refuses.
  const shimDir = await mkdtemp(join(tmpdir(), 'crd-migrator-noadmin-'))
  t.teardown(() => rm(shimDir, { recursive: true, force: true }))
  const realIp = execFileSync('sh', ['-c', 'command -v ip'], { encoding: 'utf8' }).trim()
  await writeFile(join(shimDir, 'ip'), `#!/bin/sh\nexec setpriv --bounding-set -net_admin --inh-caps -net_admin ${realIp} "$@"\n`)
  await chmod(join(shimDir, 'ip'), 0o755)
  const before = await loopbackIpv4Addresses()
  const path = process.env['PATH']
  process.env['PATH'] = `${shimDir}:${path ?? ''}`
  try {
    await t.rejects(startControlPlane({ apiservers: 2 }), /CAP_NET_ADMIN/)
  } finally {
    process.env['PATH'] = path
  }
  t.same(await loopbackIpv4Addresses(), before, "nothing added to the namespace's lo")
})
