#!/usr/bin/env node
/**
 * kubectl_complete-crd_migrator: kubectl (1.26 and later) completes `kubectl crd-migrator ...`
 * by running this executable from PATH with the words after the plugin's name, and reads
 * cobra's answer: what `crd-migrator __complete WORD...` prints.
 */
import { buildProgram } from './program.js'
import { PLUGIN_NAME } from './program-name.js'
import { runComplete } from './complete/complete.js'

await runComplete(buildProgram(PLUGIN_NAME), process.argv.slice(2))
