// Environment for every wrangler / Miniflare the project starts (npm start, tests, benches):
// no network look-ups, so a machine without internet prints no errors.
//   WRANGLER_SEND_METRICS=false      no usage metrics (and no metrics-permission record)
//   CLOUDFLARE_CF_FETCH_ENABLED=false  no download of the `request.cf` sample from workers.cloudflare.com
//   WRANGLER_HIDE_BANNER=true        no banner, whose update check asks the npm registry for news
export const QUIET_ENV = Object.freeze({
  WRANGLER_SEND_METRICS: "false",
  CLOUDFLARE_CF_FETCH_ENABLED: "false",
  WRANGLER_HIDE_BANNER: "true",
});
