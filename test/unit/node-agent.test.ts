/**
 * The node agent's pure parts (dev/agent/): the image mapping and Kubernetes' command/args
 * rules, `$(VAR)` expansion and quantities, the pod phase and status, the atomic writer's
 * swap, and the start script's quoting.
 */
import { lstat, readFile, readdir, readlink } from 'node:fs/promises'
import { join } from 'node:path'
import t from 'tap'
import type { V1PodSpec } from '@kubernetes/client-node'
import { writeAtomically } from '../../dev/agent/atomic-writer.js'
import { expand, kubernetesServiceEnv, parseQuantity } from '../../dev/agent/env.js'
import { commandLine, imageRepositoryName, resolveImage } from '../../dev/agent/image.js'
import { podPhase, podStatus, qosClass, type ContainerView } from '../../dev/agent/pod-status.js'
import { resolvePort } from '../../dev/agent/probes.js'
import { sq, startScript, type ContainerLaunch } from '../../dev/agent/sandbox.js'

t.test('images: the project image by repository name, any registry, tag or digest; others refused', async (t) => {
  t.equal(imageRepositoryName('crd-migrator'), 'crd-migrator')
  t.equal(imageRepositoryName('ghcr.io/acme/crd-migrator:0.1.0@sha256:abc'), 'crd-migrator')
  t.equal(imageRepositoryName('localhost:5000/crd-migrator:1'), 'crd-migrator')
  t.throws(() => resolveImage('nginx:1.29'), { name: 'UnsupportedImageError', message: /not one the node agent can run/ })
  t.throws(() => resolveImage('acme/crd-migrator-fork:1'), { name: 'UnsupportedImageError' })
  const image = resolveImage('registry.example/crd-migrator:0.1.0', { nodeBinary: '/opt/node/bin/node' })
  t.same(image.entrypoint, ['/nodejs/bin/node', 'dist/cli/main.js'], 'Dockerfile ENTRYPOINT')
  t.same(image.cmd, ['serve'], 'Dockerfile CMD')
  t.same(image.user, { uid: 65532, gid: 65532 }, 'Dockerfile USER')
  t.equal(image.workingDir, '/app')
  t.equal(image.env['NODE_ENV'], 'production')
  t.same(image.layers[0], { source: '/opt/node', target: '/nodejs' }, "the project's Node as /nodejs")
  t.ok(image.layers.some((l) => l.target === '/app/dist' && l.source.endsWith('/dist')))
})

t.test("command and args over ENTRYPOINT and CMD, as Kubernetes' rules say", async (t) => {
  const image = resolveImage('crd-migrator', { nodeBinary: '/n/bin/node' })
  t.same(commandLine(image, undefined, undefined), ['/nodejs/bin/node', 'dist/cli/main.js', 'serve'])
  t.same(commandLine(image, undefined, ['check', 'x']), ['/nodejs/bin/node', 'dist/cli/main.js', 'check', 'x'], 'args replace CMD')
  t.same(commandLine(image, ['/bin/sh'], undefined), ['/bin/sh'], 'command alone drops CMD too')
  t.same(commandLine(image, ['/bin/sh'], ['-c', 'true']), ['/bin/sh', '-c', 'true'])
})

t.test('$(VAR) expansion, quantities, ports, the kubernetes Service variables', async (t) => {
  const vars: Record<string, string> = { A: 'x', B: 'y' }
  t.equal(
    expand('$(A)-$(B)-$(C)-$$(A)-$$', (n) => vars[n]),
    'x-y-$(C)-$(A)-$',
  )
  t.equal(parseQuantity('500m'), 0.5)
  t.equal(parseQuantity('64Mi'), 64 * 1024 * 1024)
  t.equal(parseQuantity('2'), 2)
  t.throws(() => parseQuantity('lots'))
  t.equal(resolvePort('http', [{ name: 'http', containerPort: 8080 }]), 8080)
  t.equal(resolvePort(9443, undefined), 9443)
  t.throws(() => resolvePort('metrics', []))
  t.match(kubernetesServiceEnv({ host: 'kubernetes.default.svc', port: 443 }), {
    KUBERNETES_SERVICE_HOST: 'kubernetes.default.svc',
    KUBERNETES_SERVICE_PORT: '443',
    KUBERNETES_PORT_443_TCP_ADDR: 'kubernetes.default.svc',
  })
})

const container = (over: Partial<ContainerView> = {}): ContainerView => ({
  name: 'c',
  image: 'crd-migrator',
  imageID: 'id',
  containerID: 'cid',
  ready: false,
  started: false,
  restartCount: 0,
  state: { waiting: { reason: 'ContainerCreating' } },
  lastState: {},
  final: false,
  ...over,
})
const terminated = (exitCode: number) => ({ terminated: { exitCode, reason: exitCode === 0 ? 'Completed' : 'Error' } })

t.test('pod phase as the kubelet: Pending, Running (also while restarting), Succeeded, Failed', async (t) => {
  t.equal(podPhase([container()]), 'Pending')
  t.equal(podPhase([container({ state: { running: {} } })]), 'Running')
  t.equal(podPhase([container({ state: { waiting: { reason: 'CrashLoopBackOff' } }, restartCount: 1 })]), 'Running', 'in back-off')
  t.equal(podPhase([container({ state: terminated(0), final: true })]), 'Succeeded')
  t.equal(podPhase([container({ state: terminated(0), final: true }), container({ state: terminated(2), final: true })]), 'Failed')
  t.equal(podPhase([container({ state: terminated(1) })]), 'Running', 'terminated, about to restart')
})

t.test('pod status: conditions keep their transition time while unchanged; IPs; QoS', async (t) => {
  const spec = { containers: [{ name: 'c' }] } as V1PodSpec
  const view = { spec, podIP: '10.244.0.2', hostIP: '10.244.0.1', startTime: 'T0', sandboxReady: true }
  const first = podStatus({ ...view, containers: [container({ state: { running: {} }, started: true })] }, undefined, 'T1')
  t.match(first, { phase: 'Running', podIP: '10.244.0.2', podIPs: [{ ip: '10.244.0.2' }], hostIP: '10.244.0.1', qosClass: 'BestEffort' })
  t.match(
    first.conditions?.find((c) => c.type === 'Ready'),
    { status: 'False', reason: 'ContainersNotReady', lastTransitionTime: 'T1' },
  )
  const second = podStatus({ ...view, containers: [container({ state: { running: {} }, started: true, ready: true })] }, first, 'T2')
  t.match(
    second.conditions?.find((c) => c.type === 'Ready'),
    { status: 'True', lastTransitionTime: 'T2' },
  )
  t.equal(second.conditions?.find((c) => c.type === 'PodScheduled')?.lastTransitionTime, 'T1', 'unchanged: time kept')
  t.equal(qosClass({ containers: [{ name: 'c', resources: { limits: { cpu: '1', memory: '1Gi' } } }] }), 'Guaranteed')
  t.equal(qosClass({ containers: [{ name: 'c', resources: { requests: { cpu: '1' } } }] }), 'Burstable')
})

t.test('the atomic writer swaps ..data, drops stale files, and leaves an unchanged volume alone', async (t) => {
  const dir = join(t.testdir(), 'vol')
  const f = (s: string, mode = 0o644) => ({ data: Buffer.from(s), mode })
  t.equal(
    await writeAtomically(
      dir,
      new Map([
        ['token', f('one')],
        ['sub/ca.crt', f('ca')],
      ]),
    ),
    true,
  )
  const v1 = await readlink(join(dir, '..data'))
  t.equal(await readFile(join(dir, 'token'), 'utf8'), 'one')
  t.equal(await readFile(join(dir, 'sub', 'ca.crt'), 'utf8'), 'ca')
  t.ok((await lstat(join(dir, 'token'))).isSymbolicLink(), 'top-level entries are links into ..data')
  t.equal(
    await writeAtomically(
      dir,
      new Map([
        ['token', f('one')],
        ['sub/ca.crt', f('ca')],
      ]),
    ),
    false,
    'same content: nothing written',
  )
  t.equal(await writeAtomically(dir, new Map([['token', f('two', 0o600)]])), true)
  t.not(await readlink(join(dir, '..data')), v1, 'a new version')
  t.equal(await readFile(join(dir, 'token'), 'utf8'), 'two')
  t.same((await readdir(dir)).sort(), ['..data', await readlink(join(dir, '..data')), 'token'].sort(), 'old version and stale entry gone')
  await t.rejects(writeAtomically(dir, new Map([['../escape', f('x')]])), /stay inside the volume/)
})

t.test('the start script: quoted, the container process exec-ed last with only its environment', async (t) => {
  t.equal(sq(`it's`), `'it'\\''s'`)
  const launch: ContainerLaunch = {
    name: 'c',
    hostname: 'web-1',
    command: ['/nodejs/bin/node', '-e', `console.log('$(x) "y"')`],
    env: new Map([['GREETING', `it's "here"`]]),
    workingDir: '/app',
    uid: 1234,
    gid: 2345,
    groups: [3456],
    noNewPrivs: true,
    readOnlyRootFilesystem: true,
    layers: [{ source: '/repo/dist', target: '/app/dist' }],
    mounts: [{ source: '/pods/x/volumes/secret', mountPath: '/etc/web/secret', readOnly: true }],
  }
  const script = startScript(launch, '/pods/x/rootfs', '/pods/x/layers', '/pods/x/started')
  const last = script.trim().split('\n').at(-1)!
  t.match(last, /^exec \/usr\/sbin\/chroot '\/pods\/x\/rootfs' \/usr\/bin\/setpriv --reuid=1234 --regid=2345 --groups=3456 /)
  t.match(last, /--inh-caps=-all --bounding-set=-all --no-new-privs -- \/usr\/bin\/env -i -C '\/app' -- 'GREETING=it'\\''s "here"' /)
  t.ok(last.endsWith(`'/nodejs/bin/node' '-e' 'console.log('\\''$(x) "y"'\\'')'`), 'the command, quoted')
  t.match(script, /mount --bind '\/pods\/x\/volumes\/secret' '\/pods\/x\/rootfs\/etc\/web\/secret'\nmount -o remount,bind,ro/)
  t.match(script, /mount -o remount,ro '\/pods\/x\/rootfs'\ntouch '\/pods\/x\/started'\n/, 'read-only root, then the started marker')
})
