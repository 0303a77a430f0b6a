// The web page of h3 serve in a headless Chromium: fill the form, submit, see the job in the
// queue, a preview frame from the event stream and the finished video in the <video> element.
// Usage: node serve_page.mjs CHROMIUM URL   (scripts/test-browser.sh starts the server)
import puppeteer from 'puppeteer-core';

const [chromium, url] = process.argv.slice(2);
const fail = (msg) => { console.error('FAIL: ' + msg); process.exit(1); };
const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
try {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(url, { waitUntil: 'load', timeout: 30000 });
  await page.waitForFunction(() => document.getElementById('model').textContent.includes('model'),
                             { timeout: 10000 });
  await page.type('#prompt', 'a red ball bouncing');
  await page.type('#size', '64x32');
  await page.type('#seconds', '0.92');
  await page.type('#steps', '3');
  await page.click('#any');
  await page.click('#submit');
  // The job shows in the queue, a preview arrives over the event stream, then the video.
  await page.waitForFunction(() => document.querySelectorAll('#jobs li').length === 1, { timeout: 15000 });
  await page.waitForFunction(() => (document.getElementById('preview').src || '').startsWith('data:image/jpeg;base64,'),
                             { timeout: 120000 });
  await page.waitForFunction(() => (document.getElementById('video').src || '').includes('/content'),
                             { timeout: 120000 });
  const status = await page.$eval('#status', (e) => e.textContent);
  if (!status.includes('completed')) fail('status is "' + status + '"');
  // The <video> element loads the MP4 (metadata at least) unless this Chromium lacks H.264.
  const media = await page.evaluate(() => new Promise((resolve) => {
    const v = document.getElementById('video');
    const done = () => resolve({ ready: v.readyState, error: v.error ? v.error.code : 0, duration: v.duration });
    if (v.readyState >= 1 || v.error) return done();
    v.addEventListener('loadedmetadata', done);
    v.addEventListener('error', done);
    setTimeout(done, 20000);
  }));
  const canH264 = await page.evaluate(() => document.createElement('video').canPlayType('video/mp4; codecs="avc1.42E01E"'));
  if (canH264) {
    if (media.ready < 1) fail('the <video> element did not load the MP4: ' + JSON.stringify(media));
    console.log('video element: ' + JSON.stringify(media));
  } else {
    console.log('SKIP (part): this Chromium cannot play H.264; the page set the video source: ' + JSON.stringify(media));
  }
  if (errors.length) fail('page errors: ' + errors.join('; '));
  console.log('PASS: form -> queue -> preview -> completed video (' + status + ')');
} finally {
  await browser.close();
}
