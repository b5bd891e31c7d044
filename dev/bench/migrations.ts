/**
 * Every migration run of the bench on one control plane (started here, or a running one
 * with --controlplane-state): the migrators' identity (a ServiceAccount, under API Priority
 * and Fairness), then the plain-CRD case, the good-neighbour case and the conversion case.
 */
import { mkdir } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { loadKubeConfig } from '../../src/kube/client.js'
import { KubeHttp } from '../../src/kube/http.js'
import { attachControlPlane, startControlPlane, type ControlPlane } from '../controlplane/controlplane.js'
import { serviceAccountIdentity } from '../controlplane/service-account.js'
import { classify, levelNames } from './apf.js'
import { runConversionCase } from './conversion-case.js'
import { BENCH_NAMESPACES, ensureNamespaces, kubeVersion } from './fixtures.js'
import type { BenchSettings } from './flags.js'
import { installKsvmCrd, type KsvmBuild } from './ksvm.js'
import { log } from './log.js'
import type { MigrationContext } from './migration-context.js'
import { runNeighbourCase } from './neighbour-case.js'
import { runPlainCase } from './plain-case.js'
import type { BenchResult, ConversionCase, MigrationRun, NeighbourCase } from './report.js'

export interface MigrationResults {
  migrations: MigrationRun[]
  bestConcurrency: number | null
  ceilingConcurrency: number | null
  conversion: ConversionCase | null
  neighbour: NeighbourCase | null
  identity: BenchResult['identity']
}

/** Every migration run (sweeps, then each size with each migrator) on one control plane. */
export async function runMigrations(
  settings: BenchSettings,
  machine: BenchResult['machine'],
  ksvm: KsvmBuild | undefined,
): Promise<MigrationResults> {
  let cp: ControlPlane
  if (settings.controlplaneState) {
    cp = await attachControlPlane(settings.controlplaneState)
  } else {
    log('starting the local control plane')
    cp = await startControlPlane({ log })
  }
  const kc = loadKubeConfig(cp.kubeconfigPath)
  const http = new KubeHttp(kc, { maxSockets: 64 })
  let migratorHttp: KubeHttp | undefined
  try {
    machine.kubeVersion = await kubeVersion(http)
    machine.etcdVersion = await etcdVersion(cp.etcdEndpoint)
    await ensureNamespaces(http)
    if (ksvm) await installKsvmCrd(http, ksvm.crd)
    const runId = `${Date.now().toString(36)}`
    let seq = 0
    const logsDir = path.join(os.tmpdir(), `crd-migrator-bench-${runId}`)
    await mkdir(logsDir, { recursive: true })
    // The migrating processes run as a ServiceAccount, as the chart's pods do: the admin
    // kubeconfig is system:masters, which API Priority and Fairness exempts from
    // everything, so neither the good-neighbour case nor the speeds would be what a
    // cluster sees.
    const sa = await serviceAccountIdentity(cp, 'crd-migrator-bench', 'crd-migrator', path.join(logsDir, 'migrator.kubeconfig'), {
      clusterRole: 'cluster-admin',
    })
    const migratorKc = loadKubeConfig(sa.kubeconfigPath)
    migratorHttp = new KubeHttp(migratorKc)
    // A bulk request (any resource but the chart's "control" ones), to see its priority level.
    const bulkProbe = `/api/v1/namespaces/${BENCH_NAMESPACES[0]}/configmaps?limit=1`
    const levelOf = levelNames(http)
    const identity = { migrator: sa.username, priorityLevel: await levelOf((await classify(migratorHttp, bulkProbe)).priorityLevelUid) }
    if (identity.priorityLevel === 'exempt')
      throw new Error(`${sa.username} is exempt from API Priority and Fairness: the bench would not measure what a cluster sees`)
    log(`migrators run as ${sa.username}, APF priority level ${identity.priorityLevel}`)

    const ctx: MigrationContext = {
      settings,
      cp,
      http,
      sa,
      migratorKc,
      migratorHttp,
      runId,
      logsDir,
      nextRunSeq: () => ++seq,
      bulkProbe,
      levelOf,
    }

    // 1 and 2. The sweeps, then every size: ceiling, ours best, ours default, KSVM.
    const { migrations, bestConcurrency, ceilingConcurrency } = await runPlainCase(ctx, ksvm)

    // 3. The good-neighbour case: a foreground tenant alone, then during a migration by ours
    // at its defaults without and with the chart's API Priority and Fairness objects.
    const neighbour = settings.neighbourSize > 0 ? await runNeighbourCase(ctx, settings.neighbourSize) : null

    // 4. The conversion case: ceiling (merge patch and apply) and ours through the
    // webhook, answering at once and slowly.
    const conversion = settings.conversionSizes.length ? await runConversionCase(ctx, bestConcurrency) : null

    return {
      migrations,
      bestConcurrency: settings.sizes.length || conversion ? bestConcurrency : null,
      ceilingConcurrency: settings.sizes.length || conversion ? ceilingConcurrency : null,
      conversion,
      neighbour,
      identity,
    }
  } finally {
    migratorHttp?.close()
    http.close()
    if (cp.owned) await cp.stop()
  }
}

/** etcd's own version, from its /version endpoint. */
async function etcdVersion(endpoint: string): Promise<string> {
  const res = await fetch(`${endpoint}/version`)
  return `v${((await res.json()) as { etcdserver?: string }).etcdserver ?? '?'}`
}
