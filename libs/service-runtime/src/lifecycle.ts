/**
 * Process lifecycle for Weir services: run `main`, then on SIGTERM/SIGINT run its `stop`
 * (drain within the grace period, flush what must not be lost) and exit 0; a second signal
 * exits at once; a failed start exits 1 with the reason logged.
 */

/** The slice of a logger the lifecycle uses (pino fits). */
export interface LifecycleLogger {
  info(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
  fatal(obj: object, msg?: string): void;
}

/** What a started service hands back. */
export interface StartedService {
  /** Drains and releases everything; resolves when it is safe to exit. */
  stop(): Promise<void>;
}

/**
 * Runs a service until a signal (or the loss of its parent process), then stops it
 * gracefully and exits.
 */
export function runUntilSignal(name: string, logger: LifecycleLogger, main: () => Promise<StartedService>): void {
  main().then(
    (service) => {
      let signals = 0;
      const onSignal = (signal: NodeJS.Signals) => {
        signals++;
        if (signals > 1) {
          logger.error({ signal }, `${name}: second signal, exiting now`);
          process.exit(130);
        }
        logger.info({ signal }, `${name}: shutting down`);
        service.stop().then(
          () => {
            logger.info({}, `${name}: stopped`);
            process.exit(0);
          },
          (err: unknown) => {
            logger.error({ err }, `${name}: shutdown failed`);
            process.exit(1);
          },
        );
      };
      process.on('SIGTERM', onSignal);
      process.on('SIGINT', onSignal);
      // A launcher that dies without stopping us re-parents us: treat that as a SIGTERM, so
      // no service runs on as an orphan with nobody to stop it.
      const parent = process.ppid;
      const watch = setInterval(() => {
        if (process.ppid !== parent) {
          clearInterval(watch);
          onSignal('SIGTERM');
        }
      }, 1_000);
      watch.unref();
    },
    (err: unknown) => {
      logger.fatal({ err }, `${name}: failed to start`);
      process.exit(1);
    },
  );
}
