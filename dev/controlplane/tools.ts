/**
 * Locates (building on first use) the tools the Helm chart checks need, via
 * scripts/build-tools.sh: helm (built from the helm.sh/helm Go module), cert-manager's CRDs
 * and the ServiceMonitor CRD (taken from their Go modules). Cached per version outside the
 * repository; nothing is downloaded but Go modules.
 */
import { runBuildScript } from './build-script.js'
import { accessSync, constants, existsSync } from 'node:fs'
import { join } from 'node:path'
import { packageRoot } from './binaries.js'

export interface ChartTools {
  /** The helm binary. */
  helm: string
  /** Directory of cert-manager's CRD YAML files (one CRD per file). */
  certManagerCrdsDir: string
  /** The monitoring.coreos.com ServiceMonitor CRD YAML file. */
  serviceMonitorCrd: string
  /** cert-manager's controller and cainjector in one binary (dev/tools/cert-manager/main.go; see cert-manager.ts). */
  certManager: string
}

export function toolsScriptPath(): string {
  return join(packageRoot(), 'scripts', 'build-tools.sh')
}

let pending: Promise<ChartTools> | undefined

/**
 * Paths of helm and the CRDs. scripts/build-tools.sh builds them once (a lock makes
 * concurrent callers wait for one build) and prints `key=path` lines; its progress goes to
 * our stderr. `CRD_MIGRATOR_HELM` points at another helm binary (the CRDs still come from
 * the script). Memoized per process.
 */
export function ensureTools(): Promise<ChartTools> {
  pending ??= resolveTools().catch((err: unknown) => {
    pending = undefined
    throw err
  })
  return pending
}

async function resolveTools(): Promise<ChartTools> {
  const script = toolsScriptPath()
  const stdout = await runBuildScript(script, 'to build helm and to fetch the cert-manager CRDs from its Go module')
  const printed = new Map<string, string>()
  for (const line of stdout.split('\n')) {
    const eq = line.indexOf('=')
    if (eq > 0) printed.set(line.slice(0, eq).trim(), line.slice(eq + 1).trim())
  }
  const need = (key: string): string => {
    const value = printed.get(key)
    if (!value) throw new Error(`${script} did not print ${key}=<path>`)
    return value
  }
  const tools: ChartTools = {
    helm: process.env['CRD_MIGRATOR_HELM'] || need('helm'),
    certManagerCrdsDir: need('cert-manager-crds'),
    serviceMonitorCrd: need('servicemonitor-crd'),
    certManager: need('cert-manager'),
  }
  try {
    accessSync(tools.helm, constants.X_OK)
  } catch {
    throw new Error(`helm missing or not executable: ${tools.helm}`)
  }
  for (const p of [tools.certManagerCrdsDir, tools.serviceMonitorCrd, tools.certManager]) {
    if (!existsSync(p)) throw new Error(`missing: ${p}`)
  }
  return tools
}
