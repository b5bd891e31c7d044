/**
 * Locates (building on first use) kube-apiserver, kube-controller-manager, etcd and etcdctl via
 * scripts/build-controlplane.sh, which caches them per version outside the repository.
 */
import { runBuildScript } from './build-script.js'
import { accessSync, constants, existsSync, readFileSync } from 'node:fs'
import { basename, dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

export interface ControlPlaneBinaries {
  binDir: string
  kubeApiserver: string
  etcd: string
  etcdctl: string
  /** Absent from a `CRD_MIGRATOR_BIN_DIR` without it; only tests that start it need it. */
  kubeControllerManager: string | undefined
  /** Kubernetes minor version of the binaries, from the cache directory's name (`kube-v1.37.2-…`); undefined when unknown. */
  kubeMinor: number | undefined
}

/** Root of this package (the directory holding its package.json), from this module's URL. */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url))
  for (;;) {
    const pkg = join(dir, 'package.json')
    if (existsSync(pkg)) {
      try {
        if ((JSON.parse(readFileSync(pkg, 'utf8')) as { name?: string }).name === 'crd-migrator') return dir
      } catch {
        // keep walking
      }
    }
    const parent = dirname(dir)
    if (parent === dir) throw new Error(`cannot find the crd-migrator package root above ${fileURLToPath(import.meta.url)}`)
    dir = parent
  }
}

export function buildScriptPath(): string {
  return join(packageRoot(), 'scripts', 'build-controlplane.sh')
}

function binariesIn(binDir: string): ControlPlaneBinaries {
  const executable = (f: string): boolean => {
    try {
      accessSync(f, constants.X_OK)
      return true
    } catch {
      return false
    }
  }
  const b = {
    binDir,
    kubeApiserver: join(binDir, 'kube-apiserver'),
    etcd: join(binDir, 'etcd'),
    etcdctl: join(binDir, 'etcdctl'),
  }
  for (const f of [b.kubeApiserver, b.etcd, b.etcdctl]) {
    if (!executable(f)) throw new Error(`control-plane binary missing or not executable: ${f}`)
  }
  const kcm = join(binDir, 'kube-controller-manager')
  const minor = /kube-v1\.(\d+)\./.exec(basename(binDir))?.[1]
  return { ...b, kubeControllerManager: executable(kcm) ? kcm : undefined, kubeMinor: minor === undefined ? undefined : Number(minor) }
}

/** Per version asked for (the environment the build script reads), so one process can run several. */
const pending = new Map<string, Promise<ControlPlaneBinaries>>()

/**
 * Paths of kube-apiserver, etcd and etcdctl. `CRD_MIGRATOR_BIN_DIR` points at prebuilt
 * binaries and skips the build; otherwise scripts/build-controlplane.sh builds them once (it
 * takes a lock, so concurrent callers wait for one build) and prints the cache directory. Its
 * progress goes to our stderr. Memoized per process and version (CRD_MIGRATOR_KUBE_VERSION,
 * ETCD_VERSION).
 */
export function ensureBinaries(): Promise<ControlPlaneBinaries> {
  const env = process.env
  const key = [env['CRD_MIGRATOR_BIN_DIR'], env['CRD_MIGRATOR_KUBE_VERSION'] ?? env['KUBE_VERSION'], env['ETCD_VERSION']].join('|')
  let binaries = pending.get(key)
  if (!binaries) {
    binaries = resolveBinaries().catch((err: unknown) => {
      pending.delete(key)
      throw err
    })
    pending.set(key, binaries)
  }
  return binaries
}

async function resolveBinaries(): Promise<ControlPlaneBinaries> {
  const override = process.env['CRD_MIGRATOR_BIN_DIR']
  if (override) return binariesIn(override)
  const script = buildScriptPath()
  const stdout = await runBuildScript(
    script,
    'to build the local control plane (kube-apiserver, kube-controller-manager, etcd); or set CRD_MIGRATOR_BIN_DIR to a directory holding kube-apiserver, etcd and etcdctl (and kube-controller-manager for the tests that start it)',
  )
  const binDir = stdout.trim().split('\n').at(-1)?.trim()
  if (!binDir) throw new Error(`${script} did not print the binary directory`)
  return binariesIn(binDir)
}
