#!/usr/bin/env node
/**
 * The development tooling's entry point (not part of the product, never shipped):
 *   npm run cluster   a local kube-apiserver + etcd, prints its KUBECONFIG
 *   npm start         (= npm run demo) the whole story on a local control plane
 *   npm run certs     development CA and serving certificate under certs/
 * Built by `npm run build` into dist-dev/ (dev/tsconfig.json). The benchmark has its own
 * entry point, dev/bench/main.ts (`npm run bench`).
 */
import { Command, InvalidArgumentError, Option } from 'commander'
import type { DemoConversion } from './demo/demo.js'

const program = new Command()
  .name('crd-migrator-dev')
  .description('Development tooling of crd-migrator: a local control plane, the demo, development certificates.')
  .showHelpAfterError()

program
  .command('cluster')
  .description('start a local kube-apiserver and etcd (built from Go modules on first use) and print its KUBECONFIG; Ctrl-C stops it')
  .addOption(
    new Option(
      '--apiservers <n>',
      'kube-apiservers sharing the etcd, as in an HA cluster. More than 1 needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and ' +
        'runs in a network namespace of its own (ip netns, removed on exit; the host network is untouched): server i ' +
        "listens on 198.18.R.i of the benchmarking range on that namespace's loopback interface, all on one port, each " +
        'with its own hostname (kube-apiserver-<i>, in its own UTS namespace), and all listed in the default/kubernetes ' +
        'EndpointSlice; reach them with `ip netns exec <name> ...` (printed); 1 listens on 127.0.0.1',
    )
      .default('1')
      .argParser((v: string) => {
        const n = Number(v)
        if (!Number.isInteger(n) || n < 1 || n > 254) throw new InvalidArgumentError('a whole number from 1 to 254')
        return String(n)
      }),
  )
  .option(
    '--controller-manager',
    'also run kube-controller-manager with the garbage collector and the built-in storage version migrator (storagemigration.k8s.io)',
  )
  .option(
    '--cert-manager',
    "also install cert-manager's CRDs and run cert-manager (its certificates, SelfSigned and CA issuer controllers and " +
      'its cainjector; built from the cert-manager Go module on first use)',
  )
  .action(async (opts: { apiservers: string; controllerManager?: boolean; certManager?: boolean }) => {
    const { runClusterCommand } = await import('./controlplane/cluster-command.js')
    process.exitCode = await runClusterCommand({
      apiservers: Number(opts.apiservers),
      controllerManager: opts.controllerManager === true,
      certManager: opts.certManager === true,
    })
  })

program
  .command('demo')
  .description('the whole story on a local control plane: a CRD with thousands of objects moved from v1 to v2, with the freeze at work')
  .addOption(new Option('--objects <n>', 'custom resources to create').default('3000'))
  .addOption(
    new Option(
      '--conversion <strategy>',
      'how v1 and v2 convert: none (same shape), or webhook (different shapes, reshaped by an HTTPS conversion webhook; ' +
        'shows an object in etcd before and after)',
    )
      .choices(['none', 'webhook'] satisfies DemoConversion[])
      .default('none'),
  )
  .option('--keep', 'keep the control plane running at the end until Ctrl-C', false)
  .action(async (opts: { objects: string; conversion: DemoConversion; keep: boolean }) => {
    const { runDemo } = await import('./demo/demo.js')
    process.exitCode = await runDemo({ objects: Number(opts.objects), conversion: opts.conversion, keep: Boolean(opts.keep) })
  })

program
  .command('certs')
  .description('make a development CA and serving certificate for the webhook (localhost, 127.0.0.1 and the in-cluster Service names)')
  .option('--dir <dir>', 'where to write ca.crt, ca.key, tls.crt, tls.key', 'certs')
  .option('--service-name <name>', 'Service name of the webhook', 'crd-migrator')
  .option('--namespace <ns>', 'namespace of the Service', 'crd-migrator')
  .option('--host <host...>', 'more DNS names or IPs for the certificate')
  .action(async (opts: { dir: string; serviceName: string; namespace: string; host?: string[] }) => {
    const { generateDevCertificates } = await import('./certs/devcerts.js')
    const certs = await generateDevCertificates(opts.dir, {
      serviceName: opts.serviceName,
      namespace: opts.namespace,
      extraHosts: opts.host ?? [],
    })
    process.stdout.write(
      `wrote ${certs.certFile} and ${certs.keyFile} (CA ${certs.caCertFile}${certs.caReused ? ', reused' : ''}) for ${certs.hosts.join(', ')}\n`,
    )
  })

program.parseAsync(process.argv).catch((err) => {
  process.stderr.write(`crd-migrator-dev: ${err instanceof Error ? err.message : String(err)}\n`)
  process.exit(1)
})
