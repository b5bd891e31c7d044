/** Starting an owned control plane: PKI, etcd, the API servers (one, or several on addresses of their own), the controller manager. */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ensureBinaries } from './binaries.js'
import { writeKubeconfig } from './kubeconfig.js'
import { createCa, createServiceAccountKeyPair, issueClientCert, issueServingCert } from './pki.js'
import { claimLoopbackAddresses, releaseLoopbackAddresses, utsNamespacesWork } from './loopback.js'
import { currentNetworkNamespace } from './netns.js'
import { freePorts } from './ports.js'
import { releaseDirAtExit, removeDirAtExit, startGuard } from './process.js'
import type { ControlPlaneOptions, ControlPlane } from './types.js'
import { ADMIN, merge } from './base.js'
import { KCM_CONTROLLERS, controllerManagerFlags } from './controller-manager.js'
import { type OwnedLayout, type ApiserverSlot, OwnedControlPlane } from './owned.js'

/** The default kube-apiserver flags of a server listening on `address`. */
function apiserverDefaults(
  address: string,
  securePort: number,
  etcdEndpoint: string,
  layout: OwnedLayout,
  paths: { servingCert: string; servingKey: string; saKey: string; saPub: string },
): Record<string, string> {
  return {
    'etcd-servers': etcdEndpoint,
    'cert-dir': layout.certDir,
    'tls-cert-file': paths.servingCert,
    'tls-private-key-file': paths.servingKey,
    'client-ca-file': layout.caCertPath,
    'authorization-mode': 'RBAC',
    'service-account-issuer': 'https://kubernetes.default.svc',
    'service-account-key-file': paths.saPub,
    'service-account-signing-key-file': paths.saKey,
    // No controller-manager creates default ServiceAccounts here (as in envtest).
    'disable-admission-plugins': 'ServiceAccount',
    'bind-address': address,
    'advertise-address': address,
    'secure-port': String(securePort),
    'service-cluster-ip-range': '10.0.0.0/24',
    'allow-privileged': 'true',
    // A loopback address cannot be published in the default/kubernetes EndpointSlice
    // (1.37 refuses to start with it; older servers skipped it): publish nothing then.
    ...(address.startsWith('127.') ? { 'endpoint-reconciler-type': 'none' } : {}),
  }
}

/**
 * Start etcd and kube-apiserver on free loopback ports in a fresh temp dir, wait for
 * `/readyz`, and write an admin kubeconfig. The processes are killed if this process exits.
 * With `apiservers` > 1, several kube-apiservers on their own local addresses (see
 * {@link ControlPlaneOptions.apiservers}).
 */
export async function startControlPlane(opts: ControlPlaneOptions = {}): Promise<ControlPlane> {
  const t0 = Date.now()
  const log = opts.log ?? (() => {})
  const readyTimeoutMs = opts.readyTimeoutMs ?? 60_000
  const count = opts.apiservers ?? 1
  if (!Number.isInteger(count) || count < 1 || count > 254) {
    throw new Error(`apiservers must be a whole number from 1 to 254, not ${String(opts.apiservers)}`)
  }
  const several = count > 1
  if (several) {
    if (currentNetworkNamespace() === undefined) {
      throw new Error(
        'several API servers listen on addresses of their own, which exist only in a network namespace of the harness ' +
          '(the host keeps its network configuration): run in one first, `await runInNetworkNamespace()` from ' +
          'dev/controlplane/netns.ts at the top of the process (a test file imports test/helpers/network-namespace.ts first)',
      )
    }
    const uts = utsNamespacesWork()
    if (!uts.ok) {
      throw new Error(
        'several API servers run each in its own UTS namespace (`unshare --uts`, needs CAP_SYS_ADMIN) so that each has ' +
          `its own hostname and identity lease, and that failed here: ${uts.output || 'no output'}`,
      )
    }
  }
  const bins = await ensureBinaries()
  const binariesMs = Date.now() - t0
  if (opts.controllerManager && !bins.kubeControllerManager) {
    throw new Error(`controllerManager: kube-controller-manager is not in ${bins.binDir} (scripts/build-controlplane.sh builds it)`)
  }

  const dir = await mkdtemp(join(tmpdir(), 'crd-migrator-cp-'))
  removeDirAtExit(dir)
  const guard = startGuard(dir)
  const layout: OwnedLayout = {
    dir,
    runDir: join(dir, 'run'),
    etcdDataDir: join(dir, 'etcd-data'),
    certDir: join(dir, 'pki'),
    etcdLog: join(dir, 'etcd.log'),
    caCertPath: join(dir, 'pki', 'ca.crt'),
    caKeyPath: join(dir, 'pki', 'ca.key'),
    adminCertPath: join(dir, 'pki', 'admin.crt'),
    adminKeyPath: join(dir, 'pki', 'admin.key'),
  }
  await Promise.all([mkdir(layout.runDir), mkdir(layout.certDir, { mode: 0o700 })])

  let etcdClientPort: number
  let etcdPeerPort: number
  let securePort: number
  let addresses: string[]
  let loopbackAddresses: string[] = []
  if (!several) {
    ;[etcdClientPort, etcdPeerPort, securePort] = (await freePorts(3)) as [number, number, number]
    addresses = ['127.0.0.1']
  } else {
    try {
      ;[etcdClientPort, etcdPeerPort] = (await freePorts(2)) as [number, number]
      // On the namespace's lo, so they need no cleanup at exit: they go with the namespace.
      loopbackAddresses = await claimLoopbackAddresses(count)
      // The addresses are new, so a port free on the first is free on all of them (a wildcard listener would block every one).
      ;[securePort] = (await freePorts(1, loopbackAddresses[0])) as [number]
      addresses = loopbackAddresses
    } catch (err) {
      guard.disarm()
      await releaseLoopbackAddresses(loopbackAddresses)
      await rm(dir, { recursive: true, force: true })
      releaseDirAtExit(dir)
      throw err
    }
  }
  const etcdEndpoint = `http://127.0.0.1:${etcdClientPort}`
  const etcdPeer = `http://127.0.0.1:${etcdPeerPort}`

  const etcdFlags = merge(
    {
      name: 'default',
      'data-dir': layout.etcdDataDir,
      'listen-client-urls': etcdEndpoint,
      'advertise-client-urls': etcdEndpoint,
      'listen-peer-urls': etcdPeer,
      'initial-advertise-peer-urls': etcdPeer,
      'initial-cluster': `default=${etcdPeer}`,
      // Throw-away data: skip fsync (envtest does the same).
      'unsafe-no-fsync': 'true',
    },
    opts.extraEtcdFlags,
  )

  const paths = {
    servingCert: join(layout.certDir, 'apiserver.crt'),
    servingKey: join(layout.certDir, 'apiserver.key'),
    saKey: join(layout.certDir, 'sa.key'),
    saPub: join(layout.certDir, 'sa.pub'),
  }
  const adminKubeconfig = join(dir, 'admin.kubeconfig')
  const kcmKubeconfig = join(dir, 'kube-controller-manager.kubeconfig')
  const kcm = opts.controllerManager
    ? controllerManagerFlags(bins.kubeMinor, kcmKubeconfig, (await freePorts(1))[0]!, join(dir, 'kcm-certs'))
    : undefined
  const slots: ApiserverSlot[] = addresses.map((address, i) => {
    const index = i + 1
    const name = several ? `kube-apiserver-${index}` : 'kube-apiserver'
    return {
      endpoint: {
        index,
        server: `https://${address}:${securePort}`,
        address,
        kubeconfigPath: index === 1 ? adminKubeconfig : join(dir, `admin-${name}.kubeconfig`),
      },
      name,
      hostname: several ? name : undefined,
      flags: merge(apiserverDefaults(address, securePort, etcdEndpoint, layout, paths), kcm?.apiserverFlags, opts.extraApiserverFlags),
      logFile: join(dir, `${name}.log`),
      pidFile: join(layout.runDir, `${name}.pid`),
      overrides: undefined,
      process: undefined,
      readyAt: undefined,
    }
  })
  const servers = slots.map((s) => s.endpoint.server)

  const cp = new OwnedControlPlane(
    bins,
    layout,
    etcdFlags,
    slots,
    loopbackAddresses,
    etcdEndpoint,
    // filled in below, once generated (etcd starts in parallel)
    { certPem: '', keyPem: '' },
    { certPem: '', keyPem: '' },
    guard,
    readyTimeoutMs,
  )
  if (kcm) {
    cp.setControllerManager({
      flags: kcm.flags,
      env: kcm.env,
      port: Number(kcm.flags['secure-port']),
      logFile: join(dir, 'kube-controller-manager.log'),
      pidFile: join(layout.runDir, 'kube-controller-manager.pid'),
      process: undefined,
    })
  }

  try {
    log(`starting etcd on ${etcdEndpoint}`)
    // etcd needs no PKI; generate it while etcd boots.
    const etcdReady = cp.startEtcd().then(() => Date.now() - t0)
    const pki = (async () => {
      const ca = await createCa()
      const [serving, admin, sa] = await Promise.all([
        issueServingCert(ca, {
          dnsNames: ['localhost', 'kubernetes', 'kubernetes.default', 'kubernetes.default.svc'],
          ips: ['127.0.0.1', '::1', ...loopbackAddresses],
        }),
        issueClientCert(ca, ADMIN.name, ADMIN.groups),
        createServiceAccountKeyPair(),
      ])
      const w = (p: string, s: string): Promise<void> => writeFile(p, s, { mode: 0o600 })
      await Promise.all([
        w(layout.caCertPath, ca.certPem),
        w(layout.caKeyPath, ca.keyPem),
        w(layout.adminCertPath, admin.certPem),
        w(layout.adminKeyPath, admin.keyPem),
        w(paths.servingCert, serving.certPem),
        w(paths.servingKey, serving.keyPem),
        w(paths.saKey, sa.privateKeyPem),
        w(paths.saPub, sa.publicKeyPem),
        ...slots.map((s) =>
          writeKubeconfig(s.endpoint.kubeconfigPath, { server: s.endpoint.server, caPem: ca.certPem, user: ADMIN.name, ...admin }),
        ),
        // The controller manager's own identity (bootstrap RBAC binds system:kube-controller-manager to it).
        ...(kcm
          ? [
              issueClientCert(ca, 'system:kube-controller-manager', []).then((c) =>
                writeKubeconfig(kcmKubeconfig, { server: servers[0]!, caPem: ca.certPem, user: 'system:kube-controller-manager', ...c }),
              ),
            ]
          : []),
      ])
      cp.setCredentials(ca, admin)
    })()
    const [etcdReadyMs] = await Promise.all([etcdReady, pki])
    log(
      several
        ? `etcd healthy after ${etcdReadyMs}ms; starting ${count} kube-apiservers on ${servers.join(', ')}`
        : `etcd healthy after ${etcdReadyMs}ms; starting kube-apiserver on ${servers[0]}`,
    )
    await cp.startApiserver()
    if (kcm) {
      await cp.startControllerManager()
      log(`kube-controller-manager healthy after ${Date.now() - t0}ms (controllers: ${KCM_CONTROLLERS.join(', ')})`)
    }
    const readyMs = Date.now() - t0
    cp.timings = several
      ? { binariesMs, etcdReadyMs, readyMs, apiserverReadyMs: cp.apiserverReadyAt().map((at) => (at ?? t0) - t0) }
      : { binariesMs, etcdReadyMs, readyMs }
    log(
      several
        ? `${count} kube-apiservers ready after ${cp.timings.apiserverReadyMs!.join('/')}ms, all in the default/kubernetes EndpointSlice after ${readyMs}ms`
        : `kube-apiserver ready after ${readyMs}ms`,
    )
    return cp
  } catch (err) {
    const keep = opts.keepDirOnFailure ?? process.env['CRD_MIGRATOR_KEEP_FAILED'] === '1'
    if (keep) {
      releaseDirAtExit(dir)
      guard.disarm()
      await cp.stopProcesses()
      await cp.releaseAddresses()
      process.stderr.write(`crd-migrator devenv: kept ${dir} for inspection\n`)
    } else {
      await cp.stop().catch(() => {})
    }
    throw err
  }
}
