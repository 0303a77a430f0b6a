// The page served at "/": one self-contained HTML file (no external scripts, styles or fonts), so
// the server works offline and the binary is the whole product. It talks to the same API as any
// client: POST /v1/videos (multipart), GET /v1/videos for the queue, EventSource on /events for
// live progress and previews, and a <video> element on /content.
#include "serve/server.h"

namespace h3::serve {

const char* web_page_html() {
  return R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>h3 serve</title>
<style>
body{font:14px system-ui,sans-serif;margin:0;background:#111;color:#ddd}
header{padding:10px 16px;background:#1c1c1c;border-bottom:1px solid #333}
main{display:grid;grid-template-columns:minmax(280px,380px) 1fr;gap:16px;padding:16px}
fieldset{border:1px solid #333;border-radius:6px;margin:0 0 12px;padding:10px}
label{display:block;margin:6px 0 2px;color:#aaa}
input,textarea,select,button{width:100%;box-sizing:border-box;background:#222;color:#eee;border:1px solid #444;border-radius:4px;padding:6px}
button{cursor:pointer;background:#2d5;color:#000;font-weight:600;margin-top:8px}
.row{display:flex;gap:8px}.row>div{flex:1}
#jobs{list-style:none;padding:0;margin:0}
#jobs li{padding:6px;border-bottom:1px solid #2a2a2a;cursor:pointer;display:flex;justify-content:space-between;gap:6px}
#jobs li.sel{background:#243}
.st{font-size:12px;padding:1px 6px;border-radius:8px;background:#333}
.completed{background:#264}.failed{background:#633}.in_progress{background:#446}
#preview{image-rendering:pixelated;max-width:100%;border:1px solid #333;min-height:40px}
video{max-width:100%;border:1px solid #333}
progress{width:100%}
#err{color:#f77;white-space:pre-wrap}
small{color:#888}
</style></head><body>
<header><b>h3 serve</b> <small id="model"></small></header>
<main>
<section>
<form id="form">
<fieldset><legend>New video</legend>
<label for="prompt">Prompt</label><textarea id="prompt" name="prompt" rows="4" required></textarea>
<div class="row"><div><label for="size">Size (WxH)</label><input id="size" name="size" placeholder="1344x768"></div>
<div><label for="seconds">Seconds</label><input id="seconds" name="seconds" placeholder="5.2"></div></div>
<div class="row"><div><label for="seed">Seed</label><input id="seed" name="seed" value="0"></div>
<div><label for="steps">Steps</label><input id="steps" name="steps" placeholder="preset"></div></div>
<label for="image">First keyframe (fl2va)</label><input type="file" id="image" name="image" accept="image/*">
<label for="last_image">Last keyframe (fl2va)</label><input type="file" id="last_image" name="last_image" accept="image/*">
<label for="refs">References in order (ref2va: images, videos, WAV)</label><input type="file" id="refs" multiple>
<label><input type="checkbox" id="any" style="width:auto"> allow any duration</label>
<label for="key">API key (if the server needs one)</label><input id="key" type="password" autocomplete="off">
<button type="submit" id="submit">Generate</button>
<div id="err"></div>
</fieldset></form>
<fieldset><legend>Queue</legend><ul id="jobs"></ul></fieldset>
</section>
<section>
<h3 id="title">No video selected</h3>
<div id="status"></div><progress id="bar" max="100" value="0"></progress>
<p><img id="preview" alt="preview"></p>
<p><video id="video" controls></video></p>
</section>
</main>
<script>
const $=id=>document.getElementById(id);
let current=null,source=null;
$('key').value=sessionStorage.getItem('h3key')||'';
function hdr(){const k=$('key').value;sessionStorage.setItem('h3key',k);return k?{Authorization:'Bearer '+k}:{}}
async function api(path,opt={}){opt.headers=Object.assign(hdr(),opt.headers||{});const r=await fetch(path,opt);
 const t=await r.text();let j=null;try{j=JSON.parse(t)}catch(e){}
 if(!r.ok)throw new Error((j&&j.error&&j.error.message)||(r.status+' '+t));return j}
fetch('/health').then(r=>r.json()).then(h=>$('model').textContent='model '+h.model);
$('form').onsubmit=async e=>{e.preventDefault();$('err').textContent='';
 const fd=new FormData();fd.append('prompt',$('prompt').value);
 for(const f of ['size','seconds','seed','steps'])if($(f).value.trim())fd.append(f,$(f).value.trim());
 if($('any').checked)fd.append('allow_any_duration','true');
 if($('image').files[0])fd.append('image',$('image').files[0]);
 if($('last_image').files[0])fd.append('last_image',$('last_image').files[0]);
 for(const f of $('refs').files)fd.append('input_reference',f);
 try{const j=await api('/v1/videos',{method:'POST',body:fd});select(j.id);refresh()}catch(x){$('err').textContent=x.message}};
async function refresh(){try{const l=await api('/v1/videos?limit=50');const ul=$('jobs');ul.innerHTML='';
 for(const v of l.data){const li=document.createElement('li');li.className=v.id===current?'sel':'';
  li.innerHTML='<span></span><span class="st '+v.status+'">'+v.status+' '+v.progress+'%</span>';
  li.firstChild.textContent=(v.prompt||'').slice(0,40)+' ('+v.size+', '+v.seconds+' s)';li.onclick=()=>select(v.id);ul.appendChild(li)}}catch(x){$('err').textContent=x.message}}
function show(v){$('title').textContent=v.prompt||v.id;$('bar').value=v.progress;
 $('status').textContent=v.id+': '+v.status+(v.stage?' ('+v.stage+')':'')+(v.error?' - '+v.error.message:'');
 if(v.status==='completed'){const k=$('key').value;
  if(k){fetch('/v1/videos/'+v.id+'/content',{headers:hdr()}).then(r=>r.blob()).then(b=>$('video').src=URL.createObjectURL(b))}
  else $('video').src='/v1/videos/'+v.id+'/content'}}
function select(id){current=id;if(source)source.close();$('video').removeAttribute('src');$('preview').removeAttribute('src');
 api('/v1/videos/'+id).then(show).catch(x=>$('err').textContent=x.message);
 const k=$('key').value;source=new EventSource('/v1/videos/'+id+'/events'+(k?'?access_token='+encodeURIComponent(k):''));
 source.addEventListener('stage',e=>{const d=JSON.parse(e.data);$('status').textContent=id+': '+d.stage;$('bar').value=d.progress});
 source.addEventListener('progress',e=>{const d=JSON.parse(e.data);$('status').textContent=id+': '+d.stage+' step '+d.step+'/'+d.steps;$('bar').value=d.progress});
 source.addEventListener('preview',e=>{$('preview').src=JSON.parse(e.data).image});
 for(const t of ['completed','failed','deleted'])source.addEventListener(t,e=>{source.close();show(JSON.parse(e.data));refresh()});
 refresh()}
refresh();setInterval(refresh,3000);
</script></body></html>
)HTML";
}

}  // namespace h3::serve
